/* mg_plan — predicts time, throughput and memory of one GPT training iteration for a PTD-P
   layout on a GPU cluster, or searches for the best layout (the paper's sections 3 and 5 as a
   tool). Everything lives in mg_plan.h (mg_plan_main); run `build/mg_plan --help`.
   Example, the paper's 1-trillion-parameter run:
     build/mg_plan --num-layers 128 --hidden-size 25600 --num-attention-heads 160 \
       --seq-length 2048 --global-batch-size 3072 --fp16 --recompute-granularity full \
       --gpus 3072 --gpu a100-80gb --tensor-model-parallel-size 8 --pipeline-model-parallel-size 64 */
#include "megatron.h"   /* mg_train_model_check: the model as gpt_train checks it */
#include "mg_plan.h"

int main(int argc, char **argv) {
    mg_plan_set_model_check(mg_train_model_check);
    return mg_plan_main(argc, argv, stdout, stderr);
}
