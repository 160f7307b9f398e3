// mg-test: ranks=4,8 timeout=300 flavors=cpu,cuda,asan
/* test_llama_layouts.c — a Llama-family model (RMSNorm, rotary positions with Llama 3
   scaling, 4 query heads in 2 key/value groups with a head dimension of 12 on a hidden size of
   32, SwiGLU, no biases, untied output layer; 4 layers) trains exactly like one rank on every
   parallel layout (issue 16). Each row trains 20 AdamW steps through the trainer (warm-up +
   cosine, weight decay, clipping, a global batch of 8) and is compared with the serial run of
   the same model in the same process: losses, gradient norms and the final weights (gathered)
   to <= 1e-5 relative, the weights bit-identical on every replica. Rows:
     4 ranks  t=2 (query groups split) × d=2 with sequence parallelism and ZeRO-1; 1F1B p=2 × d=2
              with ZeRO; GPipe p=2 × d=2 with dropout; ZB-H1 p=2 × d=2; interleaved p=2 (two
              model chunks per rank) × d=2; t=2 × p=2 with sequence parallelism and full
              recomputation; d=4 with selective recomputation and dropout;
     8 ranks  t=2 × p=2 × d=2 with sequence parallelism and ZeRO; interleaved t=2 × p=2 × d=2;
              bf16 t=2 × d=4 with ZeRO against the serial fp32 run (2^-7 = bf16's unit
              roundoff on the losses).
   Then: a checkpoint saved after 10 iterations under t=2 (× p=2 on 8 ranks) × d=2 with ZeRO is
   resumed under other layouts and on one rank (iterations 11-20 and the final weights equal the
   uninterrupted serial run); text generated through the layout equals one rank's; t=4 (more
   ranks than key/value groups) is refused with one line.                                  */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 20
#define TOL 1e-5
#define LLAMA_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential "          \
    "--split 1,0,0 --eval-iters 0 --seq-length 16 --micro-batch-size 1 --global-batch-size 8 " \
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-iters 20 --lr-decay-style cosine "  \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 99 --vocab-size 37 "            \
    "--num-layers 4 --hidden-size 32 --num-attention-heads 4 --group-query-attention "          \
    "--num-query-groups 2 --kv-channels 12 --normalization RMSNorm --swiglu "                   \
    "--ffn-hidden-size 48 --position-embedding-type rope --use-rope-scaling "                   \
    "--rope-scaling-factor 4 --untie-embeddings-and-output-weights --disable-bias-linear "

typedef struct llama_row {
    int world;
    const char *layout;   /* the parallel flags                                              */
    int dropout, bf16;
} llama_row;
static const llama_row rows[] = {
    {4, "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer", 0, 0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --use-distributed-optimizer",
     0, 0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule gpipe", 1, 0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1", 0, 0},
    {4, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1", 0, 0},
    {4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
        "--recompute-granularity full", 0, 0},
    {4, "--recompute-granularity selective --use-distributed-optimizer", 1, 0},
    {8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
        "--use-distributed-optimizer", 0, 0},
    {8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
        "--num-layers-per-virtual-pipeline-stage 1", 0, 0},
    {8, "--tensor-model-parallel-size 2 --use-distributed-optimizer --bf16", 0, 1},
};

static void line_of(char *out, size_t cap, const char *layout, int dropout, const char *extra) {
    snprintf(out, cap, LLAMA_LINE "--train-iters %d %s%s %s", STEPS, layout,
             dropout ? " --hidden-dropout 0.1 --attention-dropout 0.1" : "", extra);
}

/* The serial run (one rank, no communication) of the model with or without dropout. */
static void serial_run(mg_trainer *ser, int dropout, float *loss, float *norm) {
    char line[2048];
    line_of(line, sizeof line, "", dropout, "");
    gpt_setup_or_die(ser, line, NULL);
    gpt_train_steps(ser, STEPS, loss, norm);
}

static void check_row(const llama_row *row, mg_trainer *ser, const float *want_loss,
                      const float *want_norm) {
    char line[2048], name[400];
    mg_trainer tr;
    float loss[STEPS], norm[STEPS];
    double e_loss, e_norm, e_w;
    uint64_t sum;
    line_of(line, sizeof line, row->layout, row->dropout, "");
    gpt_setup_or_die(&tr, line, &comm);
    gpt_train_steps(&tr, STEPS, loss, norm);
    e_loss = gpt_agree_max(mg_test_max_rel(loss, want_loss, STEPS, 0));
    e_norm = gpt_agree_max(mg_test_max_rel(norm, want_norm, STEPS, 0));
    mg_adamw_gather_master(&tr.opt, &tr.model);
    e_w = gpt_agree_max(gpt_compare_weights(&tr.model, &ser->model, &sum));
    snprintf(name, sizeof name, "llama: %s%s (d=%d): 20 steps = serial", row->layout,
             row->dropout ? " dropout" : "", tr.dp_size);
    if (row->bf16)   /* against the fp32 run: bf16's unit roundoff 2^-8, twice it */
        mg_test_report(e_loss <= 0x1p-7, name, "losses %.3g against the serial fp32 run (tol "
                       "2^-7, bf16's unit roundoff twice)", e_loss);
    else
        mg_test_report(e_loss <= TOL && e_norm <= TOL && e_w <= TOL, name,
                       "losses %.3g, grad norms %.3g, weights %.3g (tol %.0e)", e_loss, e_norm,
                       e_w, TOL);
    snprintf(name, sizeof name, "llama: %s: the weights are bit-identical on every replica",
             row->layout);
    CHECK(gpt_same_on_stage(&comm, sum), name);
    mg_trainer_free(&tr);
}

/* Saved after 10 iterations under one layout, resumed under others and on one rank. */
static void check_resume(mg_trainer *ser, const float *want_loss) {
    static const char *const to4[] = {"--pipeline-model-parallel-size 2",
                                      "--tensor-model-parallel-size 2 --sequence-parallel", ""};
    static const char *const to8[] = {"--pipeline-model-parallel-size 4",
                                      "--tensor-model-parallel-size 2", ""};
    const char *const *to = world == 8 ? to8 : to4;
    const char *save = world == 8 ? "--tensor-model-parallel-size 2 "
                                    "--pipeline-model-parallel-size 2 --use-distributed-optimizer"
                                  : "--tensor-model-parallel-size 2 --use-distributed-optimizer";
    char tmpl[] = "/tmp/mg_test_llama_XXXXXX", line[2048], extra[300], name[400], err[MG_ERRLEN];
    mg_trainer tr;
    int k, i, rc;
    if (comm.world_rank == 0 && !mkdtemp(tmpl)) exit(1);
    MPI_Bcast(tmpl, (int)sizeof tmpl, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(extra, sizeof extra, "--save %s/ck", tmpl);
    line_of(line, sizeof line, save, 0, extra);
    gpt_setup_or_die(&tr, line, &comm);
    for (k = 0; k < 10; k++) mg_trainer_step(&tr);
    rc = mg_trainer_save(&tr, tr.args.save, err, sizeof err);
    mg_test_report(mg_test_agree(rc == 0), "llama: save after 10 iterations", "%s",
                   rc ? err : save);
    mg_trainer_free(&tr);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < 3; i++) {
        float loss[10];
        double e_loss, e_w;
        uint64_t sum;
        int alone = !to[i][0];
        /* only the sizes of the run are given: the model's switches come from the checkpoint */
        snprintf(line, sizeof line, "--data-path " GPT_DATA "gpt_tokens.bin --split 1,0,0 "
                 "--eval-iters 0 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 "
                 "--min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-iters 20 --lr-decay-style cosine "
                 "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --train-iters %d %s "
                 "--load %s/ck", STEPS, to[i], tmpl);
        gpt_setup_or_die(&tr, line, alone ? NULL : &comm);
        for (k = 0; k < 10; k++) loss[k] = (float)mg_trainer_step(&tr).loss;
        e_loss = gpt_agree_max(mg_test_max_rel(loss, want_loss + 10, 10, 0));
        e_w = gpt_agree_max(gpt_compare_weights(&tr.model, &ser->model, &sum));
        snprintf(name, sizeof name, "llama: resume (%s) -> %s: iterations 11-20 = "
                 "uninterrupted", save, alone ? "1 rank" : to[i]);
        mg_test_report(tr.loaded_iteration == 10 && e_loss <= TOL && e_w <= TOL, name,
                       "loaded %lld, losses %.3g, weights %.3g (tol %.0e)",
                       (long long)tr.loaded_iteration, e_loss, e_w, TOL);
        mg_trainer_free(&tr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) {
        snprintf(line, sizeof line, "rm -rf %s", tmpl);
        if (system(line) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
    }
}

/* Text generated by the trained model through t=2 × p=2 (or p=2) equals one rank's. */
static void check_generate(mg_trainer *ser) {
    const char *layout = world == 8 ? "--tensor-model-parallel-size 2 "
                                      "--pipeline-model-parallel-size 2"
                                    : "--pipeline-model-parallel-size 2";
    char line[2048], name[300], got[4096] = {0}, want[4096] = {0};
    mg_trainer tr;
    float loss[STEPS], norm[STEPS];
    FILE *f = tmpfile(), *g = tmpfile();
    size_t n;
    line_of(line, sizeof line, layout, 0, "");
    gpt_setup_or_die(&tr, line, &comm);
    gpt_train_steps(&tr, STEPS, loss, norm);
    mg_trainer_generate(&tr, 24, comm.world_rank == 0 ? f : NULL);
    mg_trainer_generate(ser, 24, g);
    rewind(f); rewind(g);
    n = fread(got, 1, sizeof got - 1, f);
    got[n] = 0;
    n = fread(want, 1, sizeof want - 1, g);
    want[n] = 0;
    snprintf(name, sizeof name, "llama: 24 tokens generated through %s = one rank's", layout);
    mg_test_report(mg_test_agree(comm.world_rank != 0 || (!strcmp(got, want) && want[0])),
                   name, NULL);
    fclose(f);
    fclose(g);
    mg_trainer_free(&tr);
}

int main(int argc, char **argv) {
    mg_trainer ser[2];
    float loss[2][STEPS], norm[2][STEPS];
    int i, have[2] = {0, 0};
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        const llama_row *row = &rows[i];
        if (row->world != world) continue;
        if (!have[row->dropout]) {
            serial_run(&ser[row->dropout], row->dropout, loss[row->dropout], norm[row->dropout]);
            have[row->dropout] = 1;
        }
        check_row(row, &ser[row->dropout], loss[row->dropout], norm[row->dropout]);
    }
    if (!have[0]) {
        serial_run(&ser[0], 0, loss[0], norm[0]);
        have[0] = 1;
    }
    check_resume(&ser[0], loss[0]);
    check_generate(&ser[0]);
    {
        char line[2048];
        line_of(line, sizeof line, "--tensor-model-parallel-size 4", 0, "");
        gpt_expect_error(&comm, "llama", "t=4 with 2 key/value groups is refused", line,
                         "--num-query-groups 2 is not divisible by --tensor-model-parallel-size 4");
    }
    for (i = 0; i < 2; i++) if (have[i]) mg_trainer_free(&ser[i]);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
