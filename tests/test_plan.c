// mg-test: ranks=1 timeout=120
/* test_plan.c — the performance and memory model (mg_plan.h) against hand-computed values of
   every formula, against megatron.h's own parameter and FLOP counts for GPT-2 and Llama-family
   models (and the published Llama-2-7B and Llama-3-8B sizes), against the paper's published
   throughput (Narayanan et al., SC21, Table 1 and the 1-trillion-parameter run), against the
   paper's guidance for choosing a layout, and the tool's handling of bad flags. Single rank, no device: the model is arithmetic. */
#include <string.h>

#include "mg_plan.h"
#include "megatron.h"   /* the model's own counts: mg_gpt_num_params, mg_gpt_flops_per_iteration */
#include "tests/mg_test.h"

static int close_rel(double got, double want, double tol) {
    double d = fabs(got - want), s = fabs(want) > 0 ? fabs(want) : 1.0;
    return d / s <= tol;
}
#define CHECK_REL(got, want, tol, name)                                                        \
    mg_test_report(close_rel((got), (want), (tol)), (name), "got %.10g want %.10g", (double)(got), \
                   (double)(want))

static mg_plan_model model(int l, int h, int a, int s, int V) {
    mg_plan_model m;
    memset(&m, 0, sizeof m);   /* GPT-2: no Llama option */
    m.num_layers = l; m.hidden_size = h; m.num_attention_heads = a; m.seq_length = s; m.vocab_size = V;
    return m;
}
static mg_plan_cluster cluster(const char *gpu, int gpus, int per_node) {
    mg_plan_cluster c;
    c.gpus = gpus;
    c.gpus_per_node = per_node;
    if (mg_plan_gpu_preset(gpu, &c.gpu)) { printf("not ok - preset %s missing\n", gpu); exit(1); }
    return c;
}
/* The paper's software (Megatron-LM, early 2021): fp16 with fp16 gradients, a separate
   gradient-accumulation add per microbatch, DP all-reduce after the flush, scatter/gather. */
static mg_plan_training paper_training(long B) {
    mg_plan_training tr;
    tr.global_batch_size = B;
    tr.precision = MG_PLAN_FP16;
    tr.grads_in_fp32 = 0;
    tr.overlap_grad_reduce = 0;
    tr.scatter_gather = 1;
    tr.grad_accum_fusion = 0;
    return tr;
}
/* The paper's 1-trillion-parameter run: its model, 3072 A100s on 8-GPU nodes, its software. */
typedef struct paper_run {
    mg_plan_model m;
    mg_plan_cluster c;
    mg_plan_training tr;
} paper_run;
static paper_run paper_1t(void) {
    paper_run r;
    r.m = model(128, 25600, 160, 2048, 51200);
    r.c = cluster("a100-80gb", 3072, 8);
    r.tr = paper_training(3072);
    return r;
}
static mg_plan_layout layout(int t, int p, int d, int v, int b, int rc, int sp, int dopt) {
    mg_plan_layout L;
    L.t = t; L.p = p; L.d = d; L.v = v; L.micro_batch_size = b;
    L.recompute = rc; L.sequence_parallel = sp; L.distributed_optimizer = dopt;
    L.c = 1;
    return L;
}

/* --------------------------------------------------------------------------------------------
   Counting
   ----------------------------------------------------------------------------------------- */
static void test_counting(void) {
    mg_plan_model t1 = model(128, 25600, 160, 2048, 51200), gpt2 = model(12, 768, 12, 1024, 50257);
    /* P = 12·l·h² + 13·l·h + (V+s)·h, plus the final layernorm's 2h.
       1T:    12·128·25600² = 1,006,632,960,000; 13·128·25600 = 42,598,400;
              (51200 + 2048)·25600 = 1,363,148,800          -> 1,008,038,707,200 (Table 1: 1008.0B)
              + 51,200                                      -> 1,008,038,758,400
       GPT-2: 12·12·768² = 84,934,656; 13·12·768 = 119,808; (50257 + 1024)·768 = 39,383,808
              -> 124,438,272 + 1,536 = 124,439,808, Hugging Face's count. */
    CHECK_REL(mg_plan_parameters(&t1), 1008038758400.0, 1e-15, "parameters: 1T model (PAPER.md formula + final layernorm)");
    CHECK_REL(mg_plan_parameters(&gpt2), 124439808.0, 1e-15, "parameters: GPT-2 small");
    /* F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), B = 3072:
       96·3072·2048·128·25600² = 5.0665495807918080e19;
       1 + 2048/153600 + 51200/52428800 = 1 + 0.0133333 + 0.0009766 = 1.0143099
       -> 5.139051e19 FLOPs; at the paper's 502 PFLOP/s that is a 102.4 s iteration. */
    CHECK_REL(mg_plan_flops(&t1, 3072, MG_PLAN_RECOMPUTE_FULL), 5.139051377527e19, 1e-12,
              "FLOPs per iteration: 96-coefficient formula (full recompute)");
    /* 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) = 3.7999121855938560e19 · 1.0146354 = 3.855525e19 */
    CHECK_REL(mg_plan_flops(&t1, 3072, MG_PLAN_RECOMPUTE_NONE), 3.855525483727e19, 1e-12,
              "FLOPs per iteration: 72-coefficient formula (no recompute)");
    /* selective adds the attention core's forward again: 4·B·s²·l·h = 1.6888498e17 */
    CHECK_REL(mg_plan_flops(&t1, 3072, MG_PLAN_RECOMPUTE_SELECTIVE), 3.872413982329e19, 1e-12,
              "FLOPs per iteration: selective recompute adds 4·B·s²·l·h");
    /* Bubble (p−1)/(v·m): 63/512 = 0.123046875; interleaved v = 2: 0.0615234375. */
    CHECK_REL(mg_plan_bubble_fraction(64, 512, 1), 0.123046875, 1e-15, "bubble fraction 1F1B (p-1)/m");
    CHECK_REL(mg_plan_bubble_fraction(64, 512, 2), 0.0615234375, 1e-15, "bubble fraction interleaved (p-1)/(v m)");
    CHECK(mg_plan_bubble_fraction(1, 512, 1) == 0.0, "bubble fraction: no pipeline, no bubble");
    /* Korthikanti Table 2, 1T layer, s = 2048, b = 1, h = 25600, a = 160: s·b·h = 52,428,800,
       5·a·s/h = 64:
         t = 1:                    sbh·(34 + 64)            = 5,138,022,400
         t = 8:                    sbh·(10 + 24/8 + 64/8)   = sbh·21 = 1,101,004,800
         t = 8, sequence parallel: sbh·98/8                 =   642,252,800
         t = 8, sp, selective:     sbh·34/8                 =   222,822,400
         t = 8, selective:         sbh·(10 + 3)             =   681,574,400
         full:                     2·sbh                    =   104,857,600  (/8 with sp) */
    {
        double sbh = 52428800.0;
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 1, 0, MG_PLAN_RECOMPUTE_NONE, 2), sbh * 98, 1e-15,
                  "activations: sbh(34 + 5as/h)");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 8, 0, MG_PLAN_RECOMPUTE_NONE, 2), sbh * 21, 1e-15,
                  "activations: sbh(10 + 24/t + 5as/(ht))");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 8, 1, MG_PLAN_RECOMPUTE_NONE, 2), sbh * 98 / 8, 1e-15,
                  "activations: sequence parallel sbh(34 + 5as/h)/t");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 8, 1, MG_PLAN_RECOMPUTE_SELECTIVE, 2), sbh * 34 / 8,
                  1e-15, "activations: sequence parallel + selective sbh·34/t");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 8, 0, MG_PLAN_RECOMPUTE_SELECTIVE, 2), sbh * 13,
                  1e-15, "activations: selective sbh(10 + 24/t)");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 1, 8, 0, MG_PLAN_RECOMPUTE_FULL, 2), 2 * sbh, 1e-15,
                  "activations: full recompute keeps the 2sbh layer input");
        CHECK_REL(mg_plan_activation_bytes_per_layer(&t1, 4, 8, 1, MG_PLAN_RECOMPUTE_FULL, 2), 4 * 2 * sbh / 8,
                  1e-15, "activations: full recompute + sequence parallel, b = 4: 2sbh/t");
        {   /* the tiled attention keeps no scores, a fp32 log-sum-exp per query and head */
            mg_plan_model fl = t1;
            double lse = 4.0 * t1.num_attention_heads * t1.seq_length / 8;
            fl.flash_attention = 1;
            CHECK_REL(mg_plan_activation_bytes_per_layer(&fl, 1, 8, 0, MG_PLAN_RECOMPUTE_NONE, 2),
                      sbh * 13 + lse, 1e-15, "activations: flash, none = sbh(10 + 24/t) + 4as/t");
            CHECK_REL(mg_plan_activation_bytes_per_layer(&fl, 1, 8, 1, MG_PLAN_RECOMPUTE_SELECTIVE, 2),
                      sbh * 34 / 8 + lse, 1e-15, "activations: flash, selective = none (sp: sbh·34/t + 4as/t)");
        }
    }
    /* Megatron-Core's bytes per parameter (distributed optimizer docs): 20 | 4 + 16/d for fp16
       params and grads, 18 | 6 + 12/d for 16-bit params with fp32 grads, 16 | 8 + 8/d for fp32;
       d = 8: 6, 7.5, 9. */
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_FP16, 0, 0, 8) == 20.0, "bytes/param fp16 grads: 20");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_FP16, 1, 0, 8) == 18.0, "bytes/param fp32 grads: 18");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_BF16, 1, 0, 8) == 18.0, "bytes/param bf16: 18");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_FP32, 1, 0, 8) == 16.0, "bytes/param fp32: 16");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_FP16, 0, 1, 8) == 6.0, "bytes/param distributed fp16: 4 + 16/d");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_BF16, 1, 1, 8) == 7.5, "bytes/param distributed bf16: 6 + 12/d");
    CHECK(mg_plan_bytes_per_parameter(MG_PLAN_FP32, 1, 1, 8) == 9.0, "bytes/param distributed fp32: 8 + 8/d");
}

/* --------------------------------------------------------------------------------------------
   The Llama family: one count with megatron.h
   ----------------------------------------------------------------------------------------- */
/* The model megatron.h builds for a planner model: the same switches, V padded for t = 1
   (the planner's V is the padded one in these tests, so both count the same rows). */
static mg_gpt_config gpt_config_of(const mg_plan_model *m) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = m->num_layers;
    c.hidden = m->hidden_size;
    c.n_head = m->num_attention_heads;
    c.seq_len = m->seq_length;
    c.max_pos = m->max_position_embeddings > 0 ? m->max_position_embeddings : m->seq_length;
    c.vocab_size = m->vocab_size;
    c.padded_vocab = mg_gpt_pad_vocab(m->vocab_size, 128, 1);
    c.normalization = m->rmsnorm ? MG_NORM_RMSNORM : MG_NORM_LAYERNORM;
    c.swiglu = m->swiglu;
    c.ffn_hidden = m->ffn_hidden_size;
    c.position_embedding = m->position_embedding == MG_PLAN_POS_ROPE ? MG_POS_ROPE
                           : m->position_embedding == MG_PLAN_POS_NONE ? MG_POS_NONE : MG_POS_LEARNED;
    c.n_query_groups = m->num_query_groups;
    c.kv_channels = m->kv_channels;
    c.untie_embeddings = m->untie_embeddings;
    c.disable_bias_linear = m->disable_bias_linear;
    c.add_qkv_bias = m->add_qkv_bias;
    return c;
}

/* rms, swiglu, F, g, kv_channels, pos, max_pos, untie, no bias, qkv bias */
static mg_plan_model llama(int l, int h, int a, int s, int V, int rms, int swiglu, int F, int g,
                           int d, int pos, int max_pos, int untie, int nobias, int qkv_bias) {
    mg_plan_model m = model(l, h, a, s, V);
    m.rmsnorm = rms; m.swiglu = swiglu; m.ffn_hidden_size = F; m.num_query_groups = g;
    m.kv_channels = d; m.position_embedding = pos; m.max_position_embeddings = max_pos;
    m.untie_embeddings = untie; m.disable_bias_linear = nobias; m.add_qkv_bias = qkv_bias;
    return m;
}

static void test_llama_counts(void) {
    const mg_plan_model cases[] = {
        model(12, 768, 12, 1024, 50304),                                       /* GPT-2 */
        llama(2, 256, 8, 64, 512, 1, 1, 0, 0, 0, MG_PLAN_POS_ROPE, 0, 1, 1, 0), /* Llama-2 shape */
        llama(3, 192, 6, 64, 384, 1, 1, 500, 2, 48, MG_PLAN_POS_ROPE, 0, 1, 1, 1), /* GQA, d·a≠h, Qwen2 bias */
        llama(2, 128, 4, 32, 256, 0, 1, 0, 1, 0, MG_PLAN_POS_LEARNED, 96, 0, 0, 0), /* MQA, biases, LN */
        llama(2, 128, 4, 32, 640, 1, 0, 300, 2, 0, MG_PLAN_POS_NONE, 0, 1, 0, 0),   /* GeLU F=300 */
    };
    const char *names[] = {"GPT-2 small", "RMSNorm+SwiGLU+rope+untied, no bias",
                           "GQA g=2, kv-channels 48, F=500, Q/K/V bias",
                           "LayerNorm+SwiGLU, multi-query, learned positions 96, biases",
                           "GeLU F=300, GQA, no positions, untied"};
    int i;
    for (i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        mg_gpt_config c = gpt_config_of(&cases[i]);
        char name[160];
        double B = 48;
        mg_gpt_layout L = mg_gpt_layout_single(&c, 1, 1, 1);
        double none = mg_plan_flops(&cases[i], B, MG_PLAN_RECOMPUTE_NONE);
        snprintf(name, sizeof(name), "parameters = mg_gpt_num_params: %s", names[i]);
        mg_test_report(mg_plan_parameters(&cases[i]) == (double)mg_gpt_num_params(&c), name,
                       "plan %.0f model %lld", mg_plan_parameters(&cases[i]),
                       (long long)mg_gpt_num_params(&c));
        snprintf(name, sizeof(name), "FLOPs = mg_gpt_flops_per_iteration: %s", names[i]);
        CHECK_REL(none, mg_gpt_flops_per_iteration(&c, (int64_t)B), 1e-13, name);
        /* recomputation: what the trainer counts as repeated forward FLOPs */
        L.recompute_granularity = MG_RECOMPUTE_SELECTIVE;   /* the paper's: unfused attention */
        L.attention_backend = MG_ATTN_UNFUSED;
        snprintf(name, sizeof(name), "selective recompute adds mg_gpt_flops_recomputed: %s", names[i]);
        CHECK_REL(mg_plan_flops(&cases[i], B, MG_PLAN_RECOMPUTE_SELECTIVE) - none,
                  mg_gpt_flops_recomputed(&c, &L, (int64_t)B), 1e-9, name);
        L.recompute_granularity = MG_RECOMPUTE_FULL;
        L.recompute_method = MG_RECOMPUTE_UNIFORM;
        snprintf(name, sizeof(name), "full recompute adds mg_gpt_flops_recomputed: %s", names[i]);
        CHECK_REL(mg_plan_flops(&cases[i], B, MG_PLAN_RECOMPUTE_FULL) - none,
                  mg_gpt_flops_recomputed(&c, &L, (int64_t)B), 1e-9, name);
    }
    /* Published sizes. Llama-2-7B (l 32, h 4096, a 32, F 11008, V 32000, untied, no bias):
       per layer 4·4096² + 3·4096·11008 + 2·4096 = 67,108,864 + 135,266,304 + 8,192
       = 202,383,360; ×32 = 6,476,267,520; + 2·32000·4096 = 262,144,000; + 4096
       -> 6,738,415,616 ("6.74B"). Llama-3-8B (g 8, F 14336, V 128256): per layer
       2·4096² + 2·4096·1024 + 3·4096·14336 + 8192 = 33,554,432 + 8,388,608 + 176,160,768
       + 8,192 = 218,112,000; ×32 = 6,979,584,000; + 2·128256·4096 = 1,050,673,152; + 4096
       -> 8,030,261,248 ("8.03B"). */
    {
        mg_plan_model l2 = llama(32, 4096, 32, 4096, 32000, 1, 1, 11008, 0, 0, MG_PLAN_POS_ROPE, 0, 1, 1, 0);
        mg_plan_model l3 = llama(32, 4096, 32, 8192, 128256, 1, 1, 14336, 8, 0, MG_PLAN_POS_ROPE, 0, 1, 1, 0);
        mg_gpt_config c2 = gpt_config_of(&l2), c3 = gpt_config_of(&l3);
        CHECK(mg_plan_parameters(&l2) == 6738415616.0 && mg_gpt_num_params(&c2) == 6738415616LL,
              "parameters: Llama-2-7B 6,738,415,616 (planner and model)");
        CHECK(mg_plan_parameters(&l3) == 8030261248.0 && mg_gpt_num_params(&c3) == 8030261248LL,
              "parameters: Llama-3-8B 8,030,261,248 (planner and model)");
        CHECK_REL(mg_plan_flops(&l3, 512, MG_PLAN_RECOMPUTE_NONE), mg_gpt_flops_per_iteration(&c3, 512),
                  1e-13, "FLOPs: Llama-3-8B = mg_gpt_flops_per_iteration");
        /* SwiGLU's default width: int(4·4096·2/3 / 64)·64 = 10,880 (Llama-2-7B sets 11008) */
        l2.ffn_hidden_size = 0;
        CHECK(mg_plan_ffn_hidden(&l2) == 10880, "SwiGLU's default MLP width int(8h/3/64)*64");
    }
}

/* How each option moves the memory terms, evaluated layout against layout. */
static void test_llama_memory(void) {
    mg_plan_model base = llama(4, 1024, 16, 512, 32768, 1, 1, 2816, 0, 0, MG_PLAN_POS_ROPE, 0, 0, 1, 0);
    mg_plan_model m;
    mg_plan_cluster c = cluster("a100-80gb", 8, 8);
    mg_plan_training tr = paper_training(64);
    mg_plan_result tied, untied;
    mg_plan_layout L = layout(2, 1, 4, 1, 1, MG_PLAN_RECOMPUTE_NONE, 0, 0);
    double h = 1024, V = 32768, s = 512, d = 64, t = 2, e = 2, F = 2816;
    tr.precision = MG_PLAN_BF16;
    tr.grads_in_fp32 = 1;
    /* untied, one stage: a second V·h/t matrix in weights (2 B), gradients (4 B) and
       optimizer state (12 B: master + two moments) */
    m = base; m.untie_embeddings = 1;
    CHECK(mg_plan_evaluate(&base, &tr, &c, &L, &tied, NULL, 0) == 0 &&
          mg_plan_evaluate(&m, &tr, &c, &L, &untied, NULL, 0) == 0, "evaluate: tied and untied");
    CHECK_REL(untied.mem_weights - tied.mem_weights, V * h / t * 2, 1e-12, "untied: + V*h/t weights");
    CHECK_REL(untied.mem_gradients - tied.mem_gradients, V * h / t * 4, 1e-12, "untied: + V*h/t gradients");
    CHECK_REL(untied.mem_optimizer - tied.mem_optimizer, V * h / t * 12, 1e-12,
              "untied: + V*h/t optimizer state");
    CHECK(untied.mem_activations == tied.mem_activations && untied.flops_per_iteration == tied.flops_per_iteration,
          "untied: same activations and FLOPs (the output GEMM is there either way)");
    /* two stages: the tied last stage holds a copy of the embedding anyway (same memory),
       but only the tied model all-reduces that copy's gradient with the first stage */
    L = layout(2, 2, 2, 1, 1, MG_PLAN_RECOMPUTE_NONE, 0, 0);
    CHECK(mg_plan_evaluate(&base, &tr, &c, &L, &tied, NULL, 0) == 0 &&
          mg_plan_evaluate(&m, &tr, &c, &L, &untied, NULL, 0) == 0, "evaluate: tied and untied, p=2");
    CHECK(untied.mem_total == tied.mem_total && untied.time_dp_comm < tied.time_dp_comm,
          "untied, p=2: same memory, no embedding all-reduce");
    /* the fused classifier (--fused-classifier), one stage, b = 4: the fp32 logits
       4·s·b·V/t (128 MiB) give way to dlnf s·b·h·e and one chunk of logits (fp32 + bf16:
       6 bytes a logit, 192 MiB for the whole microbatch) capped at 1 GiB on a GPU (the
       whole microbatch here) and at 64 MiB on a CPU (the same preset without SMs) */
    {
        mg_plan_training fused = tr;
        mg_plan_result r, tied_cpu, r_cpu;
        mg_plan_cluster cpu = c;
        double Vp = ceil(V / (128 * t)) * 128 * t, b = 4;
        cpu.gpu.sms = 0;
        L = layout(2, 1, 4, 1, 4, MG_PLAN_RECOMPUTE_NONE, 0, 0);
        fused.fused_classifier = 1;
        CHECK(mg_plan_evaluate(&base, &tr, &c, &L, &tied, NULL, 0) == 0 &&
              mg_plan_evaluate(&base, &fused, &c, &L, &r, NULL, 0) == 0 &&
              mg_plan_evaluate(&base, &tr, &cpu, &L, &tied_cpu, NULL, 0) == 0 &&
              mg_plan_evaluate(&base, &fused, &cpu, &L, &r_cpu, NULL, 0) == 0,
              "evaluate: fused classifier");
        CHECK_REL(tied.mem_activations - r.mem_activations,
                  4 * s * b * Vp / t - (s * b * h * e + 6 * s * b * Vp / t), 1e-12,
                  "fused classifier, GPU: - 4sbV/t logits + sbhe dlnf + the whole 6sbV/t chunk");
        CHECK_REL(tied_cpu.mem_activations - r_cpu.mem_activations,
                  4 * s * b * Vp / t - (s * b * h * e + 64.0 * 1024 * 1024), 1e-12,
                  "fused classifier, CPU: - 4sbV/t logits + sbhe dlnf + a 64 MiB chunk");
        CHECK(r.mem_weights == tied.mem_weights && r.iteration_time == tied.iteration_time,
              "fused classifier: same weights and time");
    }
    /* grouped-query attention, g = 4 of 16 heads: K and V are 4·64 wide instead of 1024:
       per layer 2·h·(a − g)·d fewer parameters; activations s·b·2·(a − g)·d·e/t less */
    m = base; m.num_query_groups = 4;
    CHECK_REL(mg_plan_parameters(&base) - mg_plan_parameters(&m), 4 * 2 * h * 12 * d, 1e-15,
              "GQA g=4: l*2h(a-g)d fewer parameters");
    CHECK_REL(mg_plan_activation_bytes_per_layer(&base, 1, 2, 0, MG_PLAN_RECOMPUTE_NONE, 2) -
              mg_plan_activation_bytes_per_layer(&m, 1, 2, 0, MG_PLAN_RECOMPUTE_NONE, 2),
              s * 2 * 12 * d * e / t, 1e-12, "GQA g=4: activations s*b*2(a-g)d*e/t less per layer");
    CHECK(mg_plan_flops(&m, 64, 0) < mg_plan_flops(&base, 64, 0), "GQA: fewer FLOPs");
    /* SwiGLU against GeLU of the same width F: a third h×F matrix, and the MLP keeps 3F
       activations (gate, up, product) instead of 2F */
    m = base; m.swiglu = 0;
    CHECK_REL(mg_plan_parameters(&base) - mg_plan_parameters(&m), 4 * h * F, 1e-15,
              "SwiGLU: l*h*F more parameters than GeLU of width F");
    CHECK_REL(mg_plan_activation_bytes_per_layer(&base, 1, 2, 0, MG_PLAN_RECOMPUTE_SELECTIVE, 2) -
              mg_plan_activation_bytes_per_layer(&m, 1, 2, 0, MG_PLAN_RECOMPUTE_SELECTIVE, 2),
              s * F * e / t, 1e-12, "SwiGLU: s*b*F*e/t more activations per layer");
    /* RMSNorm has no bias: (2l + 1)·h parameters fewer than LayerNorm */
    m = base; m.rmsnorm = 0;
    CHECK_REL(mg_plan_parameters(&m) - mg_plan_parameters(&base), 9 * h, 1e-15,
              "RMSNorm: (2l+1)h fewer parameters than LayerNorm");
    /* biases: QKV (q + 2kv), projection h, MLP up and gate 2F, down h per layer */
    m = base; m.disable_bias_linear = 0;
    CHECK_REL(mg_plan_parameters(&m) - mg_plan_parameters(&base), 4 * (3 * h + h + 2 * F + h), 1e-15,
              "linear biases: l*(q+2kv + 2h + 2F)");
    /* tensor parallelism splits whole key/value groups: t = 4 does not divide g = 2 */
    {
        char err[256];
        mg_plan_layout L4 = layout(4, 1, 2, 1, 1, MG_PLAN_RECOMPUTE_NONE, 0, 0);
        mg_plan_result r;
        m = base; m.num_query_groups = 2;
        CHECK(mg_plan_evaluate(&m, &tr, &c, &L4, &r, err, sizeof(err)) == -1 &&
              strstr(err, "key/value groups 2") && strstr(err, "valid: 1 2"),
              "t=4 with 2 key/value groups is refused, valid t named");
    }
}

/* --------------------------------------------------------------------------------------------
   Cost primitives
   ----------------------------------------------------------------------------------------- */
static void test_primitives(void) {
    mg_plan_cluster c = cluster("a100-80gb", 3072, 8);
    const mg_plan_gpu *g = &c.gpu;
    double peak = 312e12, eff = 267.9 / 312.0 * 1305.0 / 1410.0;   /* 0.7947 */
    double t, want, launch = 4e-6;
    /* Large square GEMM 8192³: 256×128 tiles, 32·64 = 2048 tiles on 108 SMs = 19 waves (the
       last one 96% full); each wave is one tile's 2·256·128·8192 FLOPs at 1/108 of
       0.7947·312 TFLOP/s: 19 · 5.3687e8 / 2.2958e12 = 4.4432e-3 s, 0.2% over the ideal. */
    t = mg_plan_gemm_time(g, 8192, 8192, 8192, 1, 2, peak);
    want = 19.0 * 2.0 * 256 * 128 * 8192 / (peak * eff / 108) + launch;
    CHECK_REL(t, want, 1e-9, "GEMM 8192^3: 19 waves of 256x128 tiles");
    CHECK(2.0 * 8192.0 * 8192 * 8192 / t / peak > 0.78, "GEMM 8192^3 runs near the sustained ceiling");
    /* Small GEMM 128³: the fastest tiling is four 64×64 tiles on 4 of the 108 SMs, each at
       half rate (reuse 64·64/128 = 32 of the full 64): 2·64·64·128 / (0.5·2.2958e12)
       = 0.913 µs, plus the 4 µs launch: 0.2% of peak. */
    t = mg_plan_gemm_time(g, 128, 128, 128, 1, 2, peak);
    want = 2.0 * 64 * 64 * 128 / (0.5 * peak * eff / 108) + launch;
    CHECK_REL(t, want, 1e-9, "GEMM 128^3: four 64x64 tiles at half rate");
    CHECK(2.0 * 128 * 128 * 128 / t / peak < 0.01, "small GEMMs run far from peak");
    /* Wave quantization: 3072×1152 is 12·9 = 108 tiles of 256×128, one full wave on 108 SMs;
       3328×1152 (8% more work) is 117 tiles: 2 waves, or 3 waves of half-size 128×128 tiles
       (26·9 = 234) = 1.5 wave-times, the best tiling. */
    {
        double one = mg_plan_gemm_time(g, 3072, 1152, 8192, 1, 2, peak);
        double more = mg_plan_gemm_time(g, 3328, 1152, 8192, 1, 2, peak);
        CHECK_REL(more - launch, 1.5 * (one - launch), 1e-9,
                  "wave quantization: 8% more work past a full wave costs 50% more time");
    }
    /* Memory-bound GEMM, K = 16: bytes 2·(4096·16·2 + 4096²) = 33,816,576 at 0.7·2039 GB/s. */
    t = mg_plan_gemm_time(g, 4096, 4096, 16, 1, 2, peak);
    CHECK_REL(t, 33816576.0 / (2039e9 * 0.7) + launch, 1e-9, "GEMM with K=16 is memory bound");
    /* Ring all-reduce of 1 GB over 8 GPUs in a node: 2·7/8·1e9 / (300e9·0.70) + 14·2 µs. */
    CHECK_REL(mg_plan_collective_time(&c, MG_PLAN_ALL_REDUCE, 8, 8, 1e9), 1.75e9 / 210e9 + 14 * 2e-6, 1e-12,
              "all-reduce over NVLink: alpha-beta ring");
    /* Across nodes, one member per node (t = 8): eight rings share the node's 200 GB/s at 0.85:
       2·5/6·1e9 / 21.25e9 + 10·6 µs. */
    CHECK_REL(mg_plan_collective_time(&c, MG_PLAN_ALL_REDUCE, 6, 1, 1e9), (10.0 / 6) * 1e9 / 21.25e9 + 10 * 6e-6,
              1e-12, "all-reduce across nodes: NICs shared by the node's rings");
    CHECK_REL(mg_plan_collective_time(&c, MG_PLAN_ALL_GATHER, 8, 8, 1e9), 0.875e9 / 210e9 + 7 * 2e-6, 1e-12,
              "all-gather: half an all-reduce");
}

/* The paper's tensor-parallel volume: per layer per microbatch each GPU communicates
   8·b·s·h·(t−1)/t elements (4 all-reduces of b·s·h). With latencies zeroed the predicted
   tensor-parallel time times the bandwidth gives that volume back: m·[(4l + 2)·8bsh(t−1)/t·e/4
   + 3 small loss all-reduces]. */
static void test_tp_volume(void) {
    mg_plan_model m = model(4, 1024, 16, 512, 32768);
    mg_plan_cluster c = cluster("a100-80gb", 8, 8);
    mg_plan_training tr = paper_training(8);
    mg_plan_layout L = layout(8, 1, 1, 1, 2, MG_PLAN_RECOMPUTE_NONE, 0, 0);
    mg_plan_result r;
    double bsh = 2.0 * 512 * 1024, bw = 300e9 * 0.70, ring = 2.0 * 7 / 8, vol;
    c.gpu.nvlink_alpha_us = 0;
    CHECK(mg_plan_evaluate(&m, &tr, &c, &L, &r, NULL, 0) == 0, "evaluate: small tensor-parallel layout");
    /* 4 layers × 4 all-reduces + embedding + output-layer input gradient = 18 of b·s·h·2 bytes;
       3 of b·s·4 bytes in the loss; m = 4 microbatches */
    vol = 4.0 * (18 * ring * bsh * 2 + 3 * ring * 2.0 * 512 * 4);
    CHECK_REL(r.time_tp_comm * bw, vol, 1e-9, "tensor-parallel volume 8bsh(t-1)/t per layer per microbatch");
}

/* The 1T layout of the paper, by hand: memory per GPU of stage 0 (t = 8, p = 64, b = 1, full
   recompute, fp16 with fp16 gradients: 20 bytes per parameter):
     parameters: 2 layers × (12h²/8 + 7h/8 + 6h) = 2 × 983,216,000 = 1,966,432,000,
                 word embedding V·h/8 = 163,840,000, positions s·h = 52,428,800 -> 2,182,700,800
                 × 20 bytes = 43,654,016,000
     activations: 64 microbatches in flight × 2 layers × 2sbh (104,857,600) = 13,421,772,800,
                 the layer being recomputed, sbh·21 = 1,101,004,800,
                 64 embedding dropout masks of s·b·h bytes = 3,355,443,200
     total 61,532,236,800 bytes = 57.31 GiB. */
static void test_memory_by_hand(void) {
    paper_run x = paper_1t();
    mg_plan_layout L = layout(8, 64, 6, 1, 1, MG_PLAN_RECOMPUTE_FULL, 0, 0);
    mg_plan_result r;
    CHECK(mg_plan_evaluate(&x.m, &x.tr, &x.c, &L, &r, NULL, 0) == 0, "evaluate: the paper's 1T layout");
    CHECK_REL(r.mem_weights + r.mem_gradients + r.mem_optimizer, 43654016000.0, 1e-12,
              "1T memory: weights + gradients + optimizer state by hand");
    CHECK_REL(r.mem_activations, 13421772800.0 + 1101004800.0 + 3355443200.0, 1e-12,
              "1T memory: activations of stage 0 by hand");
    CHECK(r.worst_stage == 0 && r.fits, "1T memory: stage 0 is the worst and it fits in 80 GB");
    /* The first stage also runs the embedding, so it is the slowest: the other stages' fill and
       drain is a little shorter than 63 of its microbatch times. */
    mg_test_report(r.bubble_fraction < 63.0 / 512 && r.bubble_fraction > 0.9 * 63.0 / 512,
                   "1T bubble just under (p-1)/m = 12.3%", "%.4f", r.bubble_fraction);
}

/* --------------------------------------------------------------------------------------------
   The paper's published points
   ----------------------------------------------------------------------------------------- */
/* Narayanan et al., SC21, Table 1 (weak scaling, A100 80 GB on Selene, s = 2048, V = 51200,
   fp16, activation recomputation): parameters (billions), heads, hidden, layers, t, p, GPUs,
   batch, achieved TFLOP/s per GPU (percent of 312 in brackets). */
static const struct { double params; int a, h, l, t, p, n, B; double tflops; } table1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},       /* 44% */
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},       /* 44% */
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},      /* 46% */
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},    /* 43% */
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},    /* 44% */
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},  /* 45% */
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148}, /* 47% */
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155}, /* 50% */
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163}, /* 52% */
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163}, /* 52% */
};

static void test_paper_points(void) {
    int i, n = (int)(sizeof(table1) / sizeof(table1[0]));
    double first_pct = 0, last_pct = 0;
    for (i = 0; i < n; i++) {
        mg_plan_model m = model(table1[i].l, table1[i].h, table1[i].a, 2048, 51200);
        mg_plan_cluster c = cluster("a100-80gb", table1[i].n, 8);
        mg_plan_training tr = paper_training(table1[i].B);
        mg_plan_layout fx = mg_plan_layout_any();
        mg_plan_result best;
        char name[160];
        int k;
        /* The paper fixes t and p (and recomputes every layer); the search picks b and v. */
        fx.t = table1[i].t;
        fx.p = table1[i].p;
        fx.c = 1;                   /* no context parallelism in 2021 */
        fx.recompute = MG_PLAN_RECOMPUTE_FULL;
        fx.sequence_parallel = 0;
        fx.distributed_optimizer = 0;
        k = mg_plan_search(&m, &tr, &c, &fx, &best, 1, NULL, NULL, 0);
        snprintf(name, sizeof(name), "Table 1 %.1fB (t=%d p=%d n=%d): parameter count rounds to the table's",
                 table1[i].params, table1[i].t, table1[i].p, table1[i].n);
        mg_test_report(fabs(mg_plan_parameters(&m) / 1e9 - table1[i].params) <= 0.05, name, "%.4fB",
                       mg_plan_parameters(&m) / 1e9);
        snprintf(name, sizeof(name), "Table 1 %.1fB: predicted TFLOP/s/GPU within 15%% of %.0f (b=%d v=%d)",
                 table1[i].params, table1[i].tflops, k > 0 ? best.layout.micro_batch_size : 0,
                 k > 0 ? best.layout.v : 0);
        mg_test_report(k == 1 && close_rel(best.tflops_per_gpu, table1[i].tflops, 0.15), name,
                       "predicted %.1f (%.1f%% of peak)", k == 1 ? best.tflops_per_gpu : 0.0,
                       k == 1 ? best.percent_of_peak : 0.0);
        /* the same with the plain 1F1B schedule (v = 1), b still free */
        {
            mg_plan_result plain;
            fx.v = 1;
            k = mg_plan_search(&m, &tr, &c, &fx, &plain, 1, NULL, NULL, 0);
            snprintf(name, sizeof(name), "Table 1 %.1fB without interleaving: within 15%% of %.0f",
                     table1[i].params, table1[i].tflops);
            mg_test_report(k == 1 && close_rel(plain.tflops_per_gpu, table1[i].tflops, 0.15), name,
                           "predicted %.1f", k == 1 ? plain.tflops_per_gpu : 0.0);
        }
        if (i == 0) first_pct = best.percent_of_peak;
        if (i == n - 1) last_pct = best.percent_of_peak;
        if (k == 1)
            mg_test_report(best.percent_of_peak >= 44 * 0.85 && best.percent_of_peak <= 52 * 1.15,
                           "weak scaling holds 44-52% of peak (within 15%)", "%.1fB: %.1f%%",
                           table1[i].params, best.percent_of_peak);
    }
    CHECK(last_pct > first_pct, "weak scaling: larger models use the GPU better (44% -> 52% in the paper)");

    /* The 1T run itself, exactly as published: t = 8, p = 64, d = 6, b = 1, no interleaving:
       163 TFLOP/s per GPU, 52% of peak, 502 PFLOP/s aggregate. */
    {
        paper_run x = paper_1t();
        mg_plan_layout L = layout(8, 64, 6, 1, 1, MG_PLAN_RECOMPUTE_FULL, 0, 0);
        mg_plan_result r;
        int ok = mg_plan_evaluate(&x.m, &x.tr, &x.c, &L, &r, NULL, 0) == 0;
        mg_test_report(ok && close_rel(r.tflops_per_gpu, 163, 0.15), "1T run: 163 TFLOP/s per GPU within 15%",
                       "predicted %.1f", r.tflops_per_gpu);
        mg_test_report(ok && close_rel(r.percent_of_peak, 52, 0.15), "1T run: 52% of peak within 15%",
                       "predicted %.1f%%", r.percent_of_peak);
        mg_test_report(ok && close_rel(r.tflops_per_gpu * 3072 / 1000, 502, 0.15),
                       "1T run: 502 PFLOP/s aggregate within 15%", "predicted %.0f",
                       r.tflops_per_gpu * 3072 / 1000);
    }
}

/* --------------------------------------------------------------------------------------------
   Search and the paper's guidance
   ----------------------------------------------------------------------------------------- */
/* Smallest t·p, with t within a node, of any layout matching `base` that fits. */
static int min_fitting_model_parallel(const mg_plan_model *m, const mg_plan_training *tr,
                                      const mg_plan_cluster *c, const mg_plan_layout *base) {
    int t, p, best = 0;
    for (t = 1; t <= c->gpus_per_node; t++)
        for (p = 1; p <= m->num_layers; p++) {
            mg_plan_layout fx = *base;
            mg_plan_result r;
            if (m->num_layers % p || m->num_attention_heads % t || c->gpus % (t * p) ||
                c->gpus_per_node % t)
                continue;
            if (best && t * p >= best) continue;
            fx.t = t;
            fx.p = p;
            if (mg_plan_search(m, tr, c, &fx, &r, 1, NULL, NULL, 0) == 1) best = t * p;
        }
    return best;
}

static void test_search(void) {
    /* The 1T model on 3072 A100s, the paper's software (no sequence parallelism, no distributed
       optimizer): the search picks t = 8 and the shallowest pipeline that fits, p = 64. */
    paper_run x = paper_1t();
    mg_plan_model t1 = x.m;
    mg_plan_cluster c = x.c;
    mg_plan_training tr = x.tr;
    mg_plan_layout fx = mg_plan_layout_any(), L;
    mg_plan_result top[10], r;
    mg_plan_search_stats st;
    int k;
    fx.sequence_parallel = 0;
    fx.distributed_optimizer = 0;
    fx.c = 1;                       /* no context parallelism in 2021 */
    k = mg_plan_search(&t1, &tr, &c, &fx, top, 10, &st, NULL, 0);
    CHECK(k > 1 && top[0].iteration_time <= top[1].iteration_time, "search: results sorted by iteration time");
    mg_test_report(k == 10 && top[0].layout.t == 8 && top[0].fits, "search 1T (paper's software): t = 8",
                   "best t=%d p=%d b=%d v=%d, %ld layouts, %ld fit", top[0].layout.t, top[0].layout.p,
                   top[0].layout.micro_batch_size, top[0].layout.v, st.evaluated, st.fitting);
    L = top[0].layout;
    L.p /= 2;
    L.d *= 2;
    L.v = 1;
    k = mg_plan_evaluate(&t1, &tr, &c, &L, &r, NULL, 0);
    mg_test_report(k == 0 && !r.fits, "search 1T: half the pipeline depth would not fit", "p=%d needs %.1f GB",
                   L.p, r.mem_total / 1073741824.0);
    /* Today's Megatron features free (bf16, sequence parallelism, selective recomputation,
       distributed optimizer): still t = 8; the pipeline may go one step deeper than memory
       needs, because the extra depth buys room for interleaving (p = 16 fits only without it,
       and its 12% bubble loses to p = 32 with v = 4). */
    tr.precision = MG_PLAN_BF16;
    tr.grads_in_fp32 = 1;
    tr.grad_accum_fusion = 1;
    fx = mg_plan_layout_any();
    fx.c = 1;   /* the paper's dimensions: context parallelism (free, it picks t = 4 × c = 2) aside */
    k = mg_plan_search(&t1, &tr, &c, &fx, top, 1, &st, NULL, 0);
    mg_test_report(k == 1 && top[0].layout.t == 8, "search 1T (all features): t = 8", "best t=%d p=%d b=%d",
                   top[0].layout.t, top[0].layout.p, top[0].layout.micro_batch_size);
    L = top[0].layout;
    {
        mg_plan_layout same = mg_plan_layout_any();
        int mp_min;
        same.c = 1;
        same.recompute = L.recompute;
        same.sequence_parallel = L.sequence_parallel;
        same.distributed_optimizer = L.distributed_optimizer;
        mp_min = min_fitting_model_parallel(&t1, &tr, &c, &same);
        mg_test_report(mp_min > 0 && L.t * L.p <= 2 * mp_min,
                       "search 1T (all features): model parallelism within 2x of what memory needs",
                       "t*p=%d, smallest that fits %d", L.t * L.p, mp_min);
    }
    CHECK(top[0].percent_of_peak > 52, "search 1T: sequence parallel + selective recompute beat 2021's 52%");
}

/* Guidance (Narayanan §3.3 and PAPER.md): (1) tensor parallelism up to the GPUs of one server,
   pipeline parallelism across servers; (2) model parallelism only as large as memory needs,
   data parallelism for the rest. Checked on several model sizes, also on 4-GPU nodes. "What
   memory needs" depends on the memory savers in use, so (2) compares the best layout with the
   smallest t·p that fits with the best layout's recomputation, sequence parallelism and
   optimizer: given those, the search must not take more than the next power of two. (With
   every saver free the search may buy less recomputation with more model parallelism: the
   310B model runs 3% faster at t·p = 96 without recomputation than at t·p = 48 with
   selective recomputation — a trade the paper, which always recomputed, did not have.) */
static void test_guidance(void) {
    static const struct { int l, h, a, n, B, per_node; } cases[] = {
        {24, 2304, 24, 64, 512, 8},      /* 1.7B   */
        {40, 6144, 48, 256, 1024, 8},    /* 18.4B  */
        {48, 8192, 64, 512, 1536, 8},    /* 39.1B  */
        {80, 12288, 96, 1536, 2304, 8},  /* 145.6B */
        {96, 16384, 128, 1920, 2160, 8}, /* 310.1B */
        {48, 8192, 64, 512, 1536, 4},    /* 39.1B on 4-GPU nodes */
        {80, 12288, 96, 1536, 2304, 4},  /* 145.6B on 4-GPU nodes */
    };
    int i, variant;
    for (variant = 0; variant < 2; variant++) {
        for (i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
            mg_plan_model m = model(cases[i].l, cases[i].h, cases[i].a, 2048, 51200);
            mg_plan_cluster c = cluster("a100-80gb", cases[i].n, cases[i].per_node);
            mg_plan_training tr = paper_training(cases[i].B);
            mg_plan_layout fx = mg_plan_layout_any();
            mg_plan_result best;
            char name[200];
            int k, mp_min;
            fx.c = 1;                    /* the paper's dimensions */
            if (variant == 0) {          /* the paper's software */
                fx.sequence_parallel = 0;
                fx.distributed_optimizer = 0;
            } else {                     /* today's: bf16, every memory saving free */
                tr.precision = MG_PLAN_BF16;
                tr.grads_in_fp32 = 1;
                tr.grad_accum_fusion = 1;
            }
            k = mg_plan_search(&m, &tr, &c, &fx, &best, 1, NULL, NULL, 0);
            snprintf(name, sizeof(name), "guidance (%s) l=%d h=%d on %d GPUs, %d per node: tensor "
                     "parallelism within a node", variant ? "today" : "2021", cases[i].l, cases[i].h,
                     cases[i].n, cases[i].per_node);
            mg_test_report(k == 1 && best.layout.t <= cases[i].per_node, name, "t=%d p=%d d=%d",
                           best.layout.t, best.layout.p, best.layout.d);
            fx.recompute = best.layout.recompute;
            fx.sequence_parallel = best.layout.sequence_parallel;
            fx.distributed_optimizer = best.layout.distributed_optimizer;
            mp_min = k == 1 ? min_fitting_model_parallel(&m, &tr, &c, &fx) : 0;
            snprintf(name, sizeof(name), "guidance (%s) l=%d h=%d on %d GPUs, %d per node: model "
                     "parallelism only as large as memory needs", variant ? "today" : "2021",
                     cases[i].l, cases[i].h, cases[i].n, cases[i].per_node);
            mg_test_report(k == 1 && mp_min > 0 && best.layout.t * best.layout.p <= 2 * mp_min, name,
                           "best t*p=%d, smallest that fits %d, d=%d", best.layout.t * best.layout.p, mp_min,
                           best.layout.d);
        }
    }
}

/* --------------------------------------------------------------------------------------------
   The tool
   ----------------------------------------------------------------------------------------- */
/* Runs mg_plan_main on argv (NULL-terminated after the program name); returns its status and
   the stderr and stdout text. */
static int run_tool(const char **args, char *errbuf, size_t errlen, char *outbuf, size_t outlen) {
    char *argv[64];
    int argc = 0, rc;
    FILE *out = tmpfile(), *err = tmpfile();
    size_t n;
    argv[argc++] = (char *)"mg_plan";
    while (args[argc - 1] && argc < 63) { argv[argc] = (char *)args[argc - 1]; argc++; }
    argv[argc] = NULL;
    rc = mg_plan_main(argc, argv, out, err);
    rewind(err);
    n = fread(errbuf, 1, errlen - 1, err);
    errbuf[n] = 0;
    rewind(out);
    n = fread(outbuf, 1, outlen - 1, out);
    outbuf[n] = 0;
    fclose(out);
    fclose(err);
    return rc;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

#define MODEL_1T "--num-layers", "128", "--hidden-size", "25600", "--num-attention-heads", "160", \
                 "--seq-length", "2048", "--global-batch-size", "3072", "--gpus", "3072"

static void test_tool(void) {
    static char err[4096], out[65536];
    static const char *bad[][24] = {
        {"--num-layers", "abc", NULL},
        {"--bogus", NULL},
        {MODEL_1T, "--tensor-model-parallel-size", "3", NULL},
        {MODEL_1T, "--pipeline-model-parallel-size", "7", NULL},
        {MODEL_1T, "--recompute-granularity", "some", NULL},
        {MODEL_1T, "--gpu", "tpu-v9", NULL},
        {MODEL_1T, "--fp16", "--bf16", NULL},
        {MODEL_1T, "--sequence-parallel", NULL},
        {MODEL_1T, "--num-layers-per-virtual-pipeline-stage", "2", NULL},
        {MODEL_1T, "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "64",
         "--num-layers-per-virtual-pipeline-stage", "3", NULL},
        {MODEL_1T, "--micro-batch-size", "5", NULL},
        {"--num-layers", "128", "--hidden-size", "25600", "--num-attention-heads", "160", NULL},
        {MODEL_1T, "--gpus", "0", NULL},
        {MODEL_1T, "--hidden-size", "25601", NULL},
        {MODEL_1T, "--tensor-model-parallel-size", NULL},
        {MODEL_1T, "--json=1", NULL},
        {MODEL_1T, "--gpu", "custom", "--peak-tflops", "100", NULL},
        {MODEL_1T, "--search", "--tensor-model-parallel-size", "7", NULL},
        {MODEL_1T, "--num-query-groups", "8", NULL},
        {MODEL_1T, "--normalization", "BatchNorm", NULL},
        {MODEL_1T, "--position-embedding-type", "alibi", NULL},
        {MODEL_1T, "--group-query-attention", "--num-query-groups", "7", NULL},
        {MODEL_1T, "--swiglu=1", NULL},
        {MODEL_1T, "--rotary-base", "-1", NULL},
        {MODEL_1T, "--max-position-embeddings", "1024", NULL},
        {MODEL_1T, "--attention-backend", "sdpa", NULL},
    };
    int i, rc;
    for (i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
        char name[128];
        rc = run_tool(bad[i], err, sizeof(err), out, sizeof(out));
        snprintf(name, sizeof(name), "bad flags #%d -> one line 'mg_plan: error:', exit 2", i);
        mg_test_report(rc == 2 && strncmp(err, "mg_plan: error: ", 16) == 0 && count_lines(err) == 1 && !out[0],
                       name, "rc %d: %s", rc, err);
    }
    {   /* models gpt_train refuses are refused with gpt_train's own message (one function,
           mg_train_model_check, checks both), and a model it takes is planned */
        static struct { const char *args[24], *gpt_train; } models[] = {
            {{"--num-layers", "24", "--hidden-size", "2032", "--num-attention-heads", "16",
              "--seq-length", "2048", "--global-batch-size", "64", "--gpus", "8",
              "--position-embedding-type", "rope", NULL},
             "rotary positions need an even head dimension (127: "},
            {{"--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
              "--seq-length", "2048", "--global-batch-size", "64", "--gpus", "8",
              "--rotary-percent", "5", NULL}, "--rotary-percent 5: out of range"},
            {{"--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
              "--seq-length", "2048", "--global-batch-size", "64", "--gpus", "8",
              "--norm-epsilon", "3", NULL}, "--norm-epsilon 3: out of range"},
            {{"--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
              "--seq-length", "2048", "--global-batch-size", "64", "--gpus", "8",
              "--position-embedding-type", "rope", "--kv-channels", "96",
              "--rotary-percent", "0.01", NULL}, "leaves 0 (need at least 2)"},
        };
        for (i = 0; i < (int)(sizeof models / sizeof models[0]); i++) {
            char name[160], want[MG_ERRLEN + 32], gerr[MG_ERRLEN];
            char *argv[24];
            int argc = 1, k;
            argv[0] = (char *)"gpt_train";
            for (k = 0; models[i].args[k]; k += 2)   /* the model's flags: gpt_train's check */
                if (strcmp(models[i].args[k], "--gpus") &&
                    strcmp(models[i].args[k], "--global-batch-size")) {
                    argv[argc++] = (char *)models[i].args[k];
                    argv[argc++] = (char *)models[i].args[k + 1];
                }
            argv[argc++] = (char *)"--vocab-size";
            argv[argc++] = (char *)"51200";
            mg_train_model_check(argc, argv, gerr, sizeof gerr);
            snprintf(want, sizeof want, "mg_plan: error: %s\n", gerr);
            rc = run_tool(models[i].args, err, sizeof(err), out, sizeof(out));
            snprintf(name, sizeof(name), "a model gpt_train refuses (%s…) is refused in "
                     "gpt_train's words", models[i].gpt_train);
            mg_test_report(rc == 2 && !strcmp(err, want) && strstr(err, models[i].gpt_train) &&
                           !out[0], name, "rc %d: %s (gpt_train: %s)", rc, err, gerr);
        }
    }
    {   /* gpt_train's --attention-backend names: unfused and local plan the unfused core; flash,
           auto and fused the tiled one (which stores no scores: less memory) */
        static const char *names[] = {"unfused", "local", "flash", "auto", "fused"};
        static char json[5][4096];
        int k;
        for (k = 0; k < 5; k++) {
            const char *args[] = {MODEL_1T, "--tensor-model-parallel-size", "8",
                                  "--pipeline-model-parallel-size", "64", "--attention-backend",
                                  names[k], "--json", NULL};
            rc = run_tool(args, err, sizeof(err), out, sizeof(out));
            memcpy(json[k], rc == 0 ? out : err, sizeof json[k] - 1);   /* both end in 0 */
        }
        CHECK(!strcmp(json[0], json[1]) && !strcmp(json[2], json[3]) && !strcmp(json[2], json[4]) &&
              strcmp(json[0], json[2]) && json[0][0] == '{' && json[2][0] == '{',
              "--attention-backend local plans as unfused; auto and fused as flash; the two differ");
    }
    {   /* --json: the required keys, the paper's layout */
        static const char *args[] = {MODEL_1T, "--fp16", "--recompute-granularity", "full",
                                     "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "64",
                                     "--json", NULL};
        rc = run_tool(args, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && out[0] == '{' && count_lines(out) == 1 && strstr(out, "\"tflops_per_gpu\": ") &&
              strstr(out, "\"percent_of_peak\": ") && strstr(out, "\"iteration_time_s\": ") &&
              strstr(out, "\"memory_per_gpu_gb\": ") && strstr(out, "\"fits\": true") &&
              strstr(out, "\"layout\": {\"t\": 8, \"p\": 64, \"d\": 6, \"v\": 1, \"micro_batch_size\": 1"),
              "--json prints one object with throughput, time, memory, fits and layout");
    }
    {   /* Llama-2-7B with gpt_train's flags: its published size, a plan */
        static const char *args[] = {"--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                                     "--seq-length", "4096", "--vocab-size", "32000", "--normalization", "RMSNorm",
                                     "--swiglu", "--ffn-hidden-size", "11008", "--position-embedding-type", "rope",
                                     "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                                     "--norm-epsilon", "1e-5", "--rotary-base", "10000",
                                     "--global-batch-size", "1024", "--gpus", "64", "--tensor-model-parallel-size",
                                     "2", "--recompute-granularity", "selective", "--use-distributed-optimizer",
                                     "--json", NULL};
        static const char *text[] = {"--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                                     "--seq-length", "8192", "--vocab-size", "128256", "--normalization", "RMSNorm",
                                     "--swiglu", "--ffn-hidden-size", "14336", "--position-embedding-type", "rope",
                                     "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                                     "--group-query-attention", "--num-query-groups", "8", "--use-rope-scaling",
                                     "--global-batch-size", "512", "--gpus", "64", NULL};
        rc = run_tool(args, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && strstr(out, "\"parameters\": 6738415616,") && strstr(out, "\"fits\": true"),
              "Llama-2-7B flags: 6,738,415,616 parameters, t=2 on 64 GPUs fits (selective, distributed optimizer)");
        rc = run_tool(text, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && strstr(out, "Llama-family 8.0B") &&
              strstr(out, "8030261248 parameters: RMSNorm, SwiGLU F=14336, 8 key/value groups of head dim 128, "
                          "rope, untied output layer, no linear biases"),
              "Llama-3-8B flags: the report names the model's options");
    }
    {   /* --search --json: the best, with the reason */
        static const char *args[] = {MODEL_1T, "--search", "--json", "--top", "3",
                                     "--context-parallel-size", "1", NULL};
        rc = run_tool(args, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && strstr(out, "\"layout\": {\"t\": 8,") && strstr(out, "\"reason\": ") &&
              strstr(out, "\"top\": ["), "--search --json gives the best layout (t=8) and why");
    }
    {   /* --search text: a table of ten and the explanation */
        static const char *args[] = {MODEL_1T, "--search", NULL};
        rc = run_tool(args, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && strstr(out, " 10  t=") && strstr(out, "why it wins:") && strstr(out, "vs #2: "),
              "--search prints the best ten and why the best wins");
    }
    {   /* a layout that does not fit says so; --search with nothing fitting exits 1 */
        static const char *args[] = {MODEL_1T, "--tensor-model-parallel-size", "8", NULL};
        static const char *none[] = {MODEL_1T, "--gpus", "8", "--search", NULL};
        rc = run_tool(args, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 0 && strstr(out, "DOES NOT FIT"), "evaluate: a 1T model on t=8 alone does not fit");
        rc = run_tool(none, err, sizeof(err), out, sizeof(out));
        CHECK(rc == 1 && strstr(out, "none of the"), "search: nothing fits on 8 GPUs -> exit 1");
    }
}

/* --------------------------------------------------------------------------------------------
   CPU calibration
   ----------------------------------------------------------------------------------------- */
static void test_calibrate(void) {
    mg_plan_gpu g;
    char err[256];
    int i, ok, one = 0;
    ok = mg_plan_gpu_preset("cpu", &g) == 0 && mg_plan_calibrate_cpu(&g, 1, 1, 0.2, err, sizeof(err)) == 0;
    mg_test_report(ok && g.peak_tflops > 1e-4 && g.hbm_gbps > 0.1 && g.memory_gb > 0.1,
                   "calibrate cpu: sgemm rate, memory bandwidth and memory measured",
                   "%.1f GFLOP/s, %.1f GB/s, %.1f GiB", g.peak_tflops * 1e3, g.hbm_gbps, g.memory_gb);
    for (i = 0; i < g.curve_points; i++) {
        ok = ok && g.curve_efficiency[i] > 0 && g.curve_efficiency[i] <= 1.0;
        one += g.curve_efficiency[i] == 1.0;
    }
    CHECK(ok && g.curve_points == 5 && one >= 1, "calibrate cpu: efficiency curve in (0, 1] with its peak at 1");
    /* the curve makes a GEMM below the smallest calibrated size run at that size's efficiency */
    if (ok) {
        double t = mg_plan_gemm_time(&g, 16, 16, 16, 1, 4, g.peak_tflops * 1e12);
        double want = 2.0 * 16 * 16 * 16 / (g.peak_tflops * 1e12 * g.curve_efficiency[0]);
        double mem = 4.0 * 3 * 16 * 16 / (g.hbm_gbps * 1e9);
        CHECK_REL(t, (want > mem ? want : mem) + g.kernel_us * 1e-6, 1e-9,
                  "cpu GEMM time follows the calibrated curve");
    }
}

/* Context parallelism: a 7B-class GPT at s = 65536 on 64 H100s (t = 8, SP, selective
   recomputation, distributed optimizer, b = 1). The activations per GPU fall as 1/c (s/c
   tokens; the ring keeps no scores): at least the 32 layers' s/c·b·h·34/t bytes with SP
   (Korthikanti's 34 without the 5·a·s/h term) plus the fp32 lse, 4·a/t per token, while
   c = 1 also holds one layer's a·s² scores for the selective recomputation; the ring costs
   time (its exposed transfers); the FLOPs counted are the paper's selective ones at c = 1 and
   those without recomputation at c > 1, whose tiled attention recomputes nothing more (the
   same as c = 1 with the tiled attention); c = 1 does not fit 80 GB, c = 4
   does; the search with c free picks c > 1; and mg_plan_check refuses a c that does not
   divide the GPUs. */
static void test_context_parallel(void) {
    mg_plan_model m = model(32, 4096, 32, 65536, 51200);
    mg_plan_cluster c = cluster("h100-sxm", 64, 8);
    mg_plan_training tr;
    mg_plan_result r[3], top[1];
    mg_plan_layout L = layout(8, 1, 8, 1, 1, MG_PLAN_RECOMPUTE_SELECTIVE, 1, 1), fx;
    mg_plan_search_stats st;
    double per_layer, ok = 1;
    char err[256];
    int k, i;
    memset(&tr, 0, sizeof tr);
    tr.global_batch_size = 64;
    tr.precision = MG_PLAN_BF16;
    tr.grads_in_fp32 = 1;
    tr.overlap_grad_reduce = 1;
    tr.grad_accum_fusion = 1;
    for (i = 0; i < 3; i++) {
        L.c = 1 << i;
        L.d = 8 >> i;
        ok = ok && mg_plan_evaluate(&m, &tr, &c, &L, &r[i], err, sizeof err) == 0;
    }
    per_layer = 65536.0 / 4 * 4096 * 34 / 8 + 4.0 * 32 / 8 * 65536 / 4;
    mg_test_report(ok && fabs(r[1].mem_activations / r[2].mem_activations - 2) < 0.02 &&
                   r[0].mem_activations > 2 * r[1].mem_activations &&
                   r[2].mem_activations >= 32 * per_layer,
                   "context parallelism: activations per GPU fall as 1/c (c = 2, 4; c = 1 "
                   "also keeps one layer's scores)",
                   "%.2f, %.2f, %.2f GB", r[0].mem_activations / 1073741824.0,
                   r[1].mem_activations / 1073741824.0, r[2].mem_activations / 1073741824.0);
    mg_test_report(ok && r[0].time_cp_comm == 0 && r[1].time_cp_comm > 0 &&
                   r[2].time_cp_comm > 0 && !r[0].fits && r[2].fits &&
                   r[0].flops_per_iteration == mg_plan_flops(&m, 64, MG_PLAN_RECOMPUTE_SELECTIVE) &&
                   r[1].flops_per_iteration == mg_plan_flops(&m, 64, MG_PLAN_RECOMPUTE_NONE) &&
                   r[2].flops_per_iteration == r[1].flops_per_iteration,
                   "context parallelism: the ring costs time, c = 1 does not fit, c = 4 does; "
                   "selective counts its recomputed FLOPs at c = 1 only",
                   "ring %.3g, %.3g s; memory %.1f, %.1f, %.1f GB", r[1].time_cp_comm,
                   r[2].time_cp_comm, r[0].mem_total / 1073741824.0,
                   r[1].mem_total / 1073741824.0, r[2].mem_total / 1073741824.0);
    m.flash_attention = 1;   /* c = 1 with the tiled attention: selective recomputes nothing */
    L.c = 1;
    L.d = 8;
    mg_test_report(mg_plan_evaluate(&m, &tr, &c, &L, &r[0], err, sizeof err) == 0 &&
                   r[0].flops_per_iteration == mg_plan_flops(&m, 64, MG_PLAN_RECOMPUTE_NONE),
                   "selective recomputation under the tiled attention counts no extra FLOPs",
                   "%.6g vs %.6g", r[0].flops_per_iteration,
                   mg_plan_flops(&m, 64, MG_PLAN_RECOMPUTE_NONE));
    m.flash_attention = 0;
    fx = mg_plan_layout_any();
    fx.t = 8;
    k = mg_plan_search(&m, &tr, &c, &fx, top, 1, &st, err, sizeof err);
    mg_test_report(k == 1 && top[0].layout.c > 1, "context parallelism: the search with c free "
                   "picks c > 1 at s = 65536", "best c=%d p=%d d=%d", k == 1 ? top[0].layout.c : 0,
                   k == 1 ? top[0].layout.p : 0, k == 1 ? top[0].layout.d : 0);
    L.c = 3;
    L.d = 1;
    k = mg_plan_check(&m, &tr, &c, &L, err, sizeof err);
    mg_test_report(k == -1 && strstr(err, "--context-parallel-size 3 must divide --gpus 64") &&
                   !strchr(err, '\n'),
                   "context parallelism: c = 3 refused with one line", "%s", err);
}

int main(void) {
    mg_plan_set_model_check(mg_train_model_check);   /* as tools/mg_plan.c does */
    test_counting();
    test_llama_counts();
    test_llama_memory();
    test_primitives();
    test_tp_volume();
    test_memory_by_hand();
    test_paper_points();
    test_search();
    test_guidance();
    test_tool();
    test_calibrate();
    test_context_parallel();
    return mg_test_summary();
}
