// mg-test: ranks=2,4,8 timeout=400 flavors=cpu,cuda,asan
/* test_cp.c — context parallelism (issue 20): every sequence split over c ranks (chunks i and
   2c−1−i of 2c), ring attention, trains exactly like one rank. Each row trains 12 AdamW steps
   through the trainer (warm-up + cosine, weight decay, clipping, a global batch of 8 sequences
   of 16 tokens) and is compared with the serial run of the same model in the same process:
   losses, gradient norms and the final weights (gathered) to <= 1e-5 relative, and the weights
   bit-identical on every replica (tensor, context and data ranks of a stage). Two models: GPT-2
   (LayerNorm, learned positions, multi-head attention, GELU, biases, tied output) and a Llama
   (RMSNorm, rotary positions, 4 query heads in 2 key/value groups, SwiGLU, no biases). Rows:
     2 ranks  c=2 GPT-2; c=2 Llama with dropout (hidden and attention: masks at global
              positions); c=2 GPT-2 with dropout and selective recomputation; c=2 Llama with
              full recomputation
     4 ranks  c=4 GPT-2 and Llama; t=2 × c=2 with sequence parallelism (GPT-2, Llama); c=2 ×
              p=2 1F1B, interleaved, ZB-H1 and GPipe; c=2 × d=2 with the distributed optimizer
              (and dropout);
              Llama c=2 × d=2 with ZeRO in bf16, its losses within 2^-7 of the serial fp32 run
              (twice bf16's unit roundoff, as test_llama_layouts)
     8 ranks  t=2 × c=2 × p=2 GPT-2 with sequence parallelism, dropout and ZeRO-1 (d = 1:
              the optimizer shards over the 2 context ranks)
   (The Llama with dropout holds its final weights to 1e-4, its losses and norms to 1e-5: its
   untied word embedding amplifies the fp32 reordering of gradient sums through Adam — 2.7e-6
   after 12 steps under c=2 here, 4.1e-5 in the asan build, 1.2e-5 under t=2 × c=2 and 4.2e-5
   under t=2 × p=2 × d=2 without context parallelism; the losses stay equal.)
   Each row also counts the bytes each rank sent on the context group: exactly the ring's K/V
   (only the key/value heads: GQA sends ng/nh of them) and fp32 dK/dV hops.
   Then: the attention tiles each context rank computed (mg_attn_block_tiles) are within 10 %
   of each other (the causal split's balance); a checkpoint saved under c=2 resumes on one rank
   and under c=4 (4 ranks) with iterations 7-12 and the final weights of the uninterrupted
   serial run; a --seq-length that does not divide into 2c chunks, and the unfused attention
   backend with c > 1, are refused with one line.                                            */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 12
#define TOL 1e-5
#define LLAMA_DROPOUT_WTOL 1e-4   /* see the top of the file */
#define BASE_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --seq-length 16 --micro-batch-size 1 --global-batch-size 8 "                \
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-iters 12 --lr-decay-style cosine "  \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 99 --vocab-size 37 "
#define GPT2_LINE BASE_LINE "--num-layers 2 --hidden-size 32 --num-attention-heads 4 "
#define LLAMA_LINE BASE_LINE "--num-layers 2 --hidden-size 32 --num-attention-heads 4 "      \
    "--group-query-attention --num-query-groups 2 --kv-channels 12 --normalization RMSNorm "  \
    "--swiglu --ffn-hidden-size 48 --position-embedding-type rope "                           \
    "--untie-embeddings-and-output-weights --disable-bias-linear "
#define DROPOUT " --hidden-dropout 0.1 --attention-dropout 0.1"

typedef struct cp_row {
    int world;
    int llama, dropout;
    const char *layout;   /* the parallel flags                                              */
    int half;             /* bf16: the losses against the serial fp32 run, to 2^-7           */
} cp_row;
static const cp_row rows[] = {
    {2, 0, 0, "--context-parallel-size 2", 0},
    {2, 1, 1, "--context-parallel-size 2", 0},
    {2, 0, 1, "--context-parallel-size 2 --recompute-granularity selective", 0},
    {2, 1, 0, "--context-parallel-size 2 --recompute-granularity full", 0},
    {4, 0, 0, "--context-parallel-size 4", 0},
    {4, 1, 0, "--context-parallel-size 4", 0},
    {4, 0, 0, "--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel", 0},
    {4, 1, 0, "--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel", 0},
    {4, 0, 0, "--context-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--pipeline-schedule 1f1b", 0},
    {4, 1, 0, "--context-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--num-layers-per-virtual-pipeline-stage 1", 0},
    {4, 0, 1, "--context-parallel-size 2 --use-distributed-optimizer", 0},
    {4, 0, 0, "--context-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--pipeline-schedule zb-h1", 0},
    {4, 1, 0, "--context-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--pipeline-schedule gpipe", 0},
    {4, 1, 0, "--context-parallel-size 2 --use-distributed-optimizer --bf16", 1},
    {8, 0, 1, "--tensor-model-parallel-size 2 --context-parallel-size 2 "
              "--pipeline-model-parallel-size 2 --sequence-parallel "
              "--use-distributed-optimizer", 0},
};

static void line_of(char *out, size_t cap, int llama, int dropout, const char *layout,
                    const char *extra) {
    snprintf(out, cap, "%s--train-iters %d %s%s %s", llama ? LLAMA_LINE : GPT2_LINE, STEPS,
             layout, dropout ? DROPOUT : "", extra);
}

/* The serial runs, one per (model, dropout), made when first needed. */
static mg_trainer ser[2][2];
static float ser_loss[2][2][STEPS], ser_norm[2][2][STEPS];
static int have[2][2];
static mg_trainer *serial(int llama, int dropout) {
    if (!have[llama][dropout]) {
        char line[2048];
        line_of(line, sizeof line, llama, dropout, "", "");
        gpt_setup_or_die(&ser[llama][dropout], line, NULL);
        gpt_train_steps(&ser[llama][dropout], STEPS, ser_loss[llama][dropout],
                        ser_norm[llama][dropout]);
        have[llama][dropout] = 1;
    }
    return &ser[llama][dropout];
}

/* Bytes this rank sent on the context group: the ring's, per layer forward (c − 1 hops of the
   packed K/V: 2·(ng/t)·hd values per local token, in the activations' dtype) and backward (the
   K/V again, and c hops of the fp32 dK/dV); full recomputation repeats the forward. Each of
   the rank's layers runs once per microbatch.                                              */
static int ring_traffic_ok(mg_trainer *tr, uint64_t sent, uint64_t *want) {
    const mg_gpt_layout *L = &tr->model.layout;
    const mg_transformer *tf = &tr->model.tf;
    uint64_t layers = 0, c = (uint64_t)L->cp_size, kv, fwd, bwd;
    for (int ch = 0; ch < L->n_chunks; ch++)
        layers += (uint64_t)(L->chunks[ch].layer_end - L->chunks[ch].layer_begin);
    kv = 2 * (uint64_t)(tf->cfg.n_group / tf->tp.size) * (uint64_t)tf->cfg.head_dim *
         (uint64_t)tf->cfg.seq_len * (uint64_t)tf->cfg.micro_batch;
    fwd = (c - 1) * kv * mg_dtype_size(tf->cfg.dtype);
    bwd = fwd + c * kv * 4;
    *want = (uint64_t)STEPS * (uint64_t)tr->n_micro * layers *
            (fwd * (L->recompute_granularity == MG_RECOMPUTE_FULL ? 2 : 1) + bwd);
    return sent == *want;
}

/* Attention tiles of this rank's forwards, max/min over its context group (1: equal); and
   whether they are mg_cp_attention_tiles per layer forward (each of the rank's layers runs
   one forward per microbatch, twice with full recomputation).                             */
static double tile_balance(mg_trainer *tr, int *count_ok) {
    long long mine = (long long)tr->model.tf.cp_tiles, hi = mine, lo = mine, layers = 0;
    const mg_gpt_layout *L = &tr->model.layout;
    for (int ch = 0; ch < L->n_chunks; ch++)
        layers += L->chunks[ch].layer_end - L->chunks[ch].layer_begin;
    *count_ok = mine == (long long)STEPS * tr->n_micro * layers *
                        (L->recompute_granularity == MG_RECOMPUTE_FULL ? 2 : 1) *
                        mg_cp_attention_tiles(L->cp_rank, L->cp_size,
                                              mg_gpt_local_seq(&tr->model.cfg, L));
    MPI_Allreduce(&mine, &hi, 1, MPI_LONG_LONG, MPI_MAX, *(MPI_Comm *)comm.context.mpi_comm);
    MPI_Allreduce(&mine, &lo, 1, MPI_LONG_LONG, MPI_MIN, *(MPI_Comm *)comm.context.mpi_comm);
    return lo > 0 ? (double)hi / (double)lo : 1e300;
}

static void check_row(const cp_row *row) {
    char line[2048], name[400];
    mg_trainer tr, *s = serial(row->llama, row->dropout);
    float loss[STEPS], norm[STEPS];
    double e_loss, e_norm, e_w, balance;
    double wtol = row->llama && row->dropout ? LLAMA_DROPOUT_WTOL : TOL;
    uint64_t sum, sent, want_sent;
    int count_ok, traffic_ok;
    line_of(line, sizeof line, row->llama, row->dropout, row->layout, "");
    gpt_setup_or_die(&tr, line, &comm);
    mg_comm_reset_traffic(&comm);
    gpt_train_steps(&tr, STEPS, loss, norm);
    sent = comm.bytes_sent[MG_GROUP_CONTEXT];
    traffic_ok = ring_traffic_ok(&tr, sent, &want_sent);
    e_loss = gpt_agree_max(mg_test_max_rel(loss, ser_loss[row->llama][row->dropout], STEPS, 0));
    e_norm = gpt_agree_max(mg_test_max_rel(norm, ser_norm[row->llama][row->dropout], STEPS, 0));
    balance = gpt_agree_max(tile_balance(&tr, &count_ok));
    mg_adamw_gather_master(&tr.opt, &tr.model);
    e_w = gpt_agree_max(gpt_compare_weights(&tr.model, &s->model, &sum));
    snprintf(name, sizeof name, "%s: %s%s (d=%d): %d steps = serial", row->llama ? "llama" :
             "gpt2", row->layout, row->dropout ? " dropout" : "", tr.dp_size, STEPS);
    if (row->half)   /* against the fp32 run: twice bf16's unit roundoff */
        mg_test_report(e_loss <= 0x1p-7, name, "losses %.3g against the serial fp32 run (tol "
                       "2^-7)", e_loss);
    else
        mg_test_report(e_loss <= TOL && e_norm <= TOL && e_w <= wtol, name,
                       "losses %.3g, grad norms %.3g, weights %.3g (tol %.0e, weights %.0e)",
                       e_loss, e_norm, e_w, TOL, wtol);
    snprintf(name, sizeof name, "%s: %s: weights bit-identical on every replica; attention "
             "tiles per context rank within 10%% (= mg_cp_attention_tiles per layer forward); "
             "the ring's bytes on the context group", row->llama ? "llama" : "gpt2", row->layout);
    mg_test_report(gpt_same_on_stage(&comm, sum) && balance <= 1.10 &&
                   mg_test_agree(count_ok) && mg_test_agree(traffic_ok), name,
                   "max/min tiles over the context group %.3f; rank 0 sent %llu bytes (want %llu)",
                   balance, (unsigned long long)sent, (unsigned long long)want_sent);
    mg_trainer_free(&tr);
}

/* The causal split's balance at T = 16384 for c = 2, 4, 8: the tiles of each rank's ring
   (mg_cp_attention_tiles) within 10 % of each other, against the contiguous split (rank r
   holds positions [r·T/c, (r+1)·T/c) and attends to every earlier key), whose last rank
   does about 2c−1 times the first's work (check_row compares the count with the ring's).  */
static void check_balance(void) {
    const int64_t T = 16384;
    char name[400], what[600] = "";
    int ok = 1;
    size_t used = 0;
    for (int c = 2; c <= 8; c *= 2) {
        int64_t lo = -1, hi = 0, clo = -1, chi = 0;
        for (int r = 0; r < c; r++) {
            mg_attn_block k;
            int64_t n = mg_cp_attention_tiles(r, c, T / c), m;
            memset(&k, 0, sizeof k);
            k.B = k.n_head = k.n_group = 1;
            k.Tq = (int)(T / c);
            k.Tk = (int)T;
            k.q_pos0 = r * (T / c);
            m = mg_attn_block_tiles(&k);
            if (lo < 0 || n < lo) lo = n;
            if (n > hi) hi = n;
            if (clo < 0 || m < clo) clo = m;
            if (m > chi) chi = m;
        }
        ok &= (double)hi <= 1.10 * (double)lo;
        used += (size_t)snprintf(what + used, sizeof what - used, "%sc=%d: %lld..%lld tiles "
                                 "(contiguous %lld..%lld)", c > 2 ? "; " : "", c, (long long)lo,
                                 (long long)hi, (long long)clo, (long long)chi);
    }
    snprintf(name, sizeof name, "causal split at T=16384: attention tiles per rank within 10%% "
             "for c = 2, 4, 8");
    mg_test_report(ok, name, "%s", what);
}

/* Saved after 6 iterations under c=2, resumed under c=4 (4 ranks) and on one rank.         */
static void check_resume(void) {
    char tmpl[] = "/tmp/mg_test_cp_XXXXXX", line[2048], extra[300], name[400], err[MG_ERRLEN];
    mg_trainer tr, *s = serial(1, 0);
    int k, i, rc;
    if (comm.world_rank == 0 && !mkdtemp(tmpl)) exit(1);
    MPI_Bcast(tmpl, (int)sizeof tmpl, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(extra, sizeof extra, "--save %s/ck", tmpl);
    line_of(line, sizeof line, 1, 0, world == 2 ? "--context-parallel-size 2" :
            "--context-parallel-size 2 --use-distributed-optimizer", extra);
    gpt_setup_or_die(&tr, line, &comm);
    for (k = 0; k < 6; k++) mg_trainer_step(&tr);
    rc = mg_trainer_save(&tr, tr.args.save, err, sizeof err);
    mg_test_report(mg_test_agree(rc == 0), "llama: save after 6 iterations under c=2", "%s",
                   rc ? err : "");
    mg_trainer_free(&tr);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < 2; i++) {
        const char *to = i == 0 ? "" : world == 4 ? "--context-parallel-size 4" :
                         "--context-parallel-size 2";
        float loss[6];
        double e_loss, e_w;
        uint64_t sum;
        snprintf(line, sizeof line, "--data-path " GPT_DATA "gpt_tokens.bin --split 1,0,0 "
                 "--eval-iters 0 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 "
                 "--min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-iters 12 --lr-decay-style cosine "
                 "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --train-iters %d %s "
                 "--load %s/ck", STEPS, to, tmpl);
        gpt_setup_or_die(&tr, line, i == 0 ? NULL : &comm);
        for (k = 0; k < 6; k++) loss[k] = (float)mg_trainer_step(&tr).loss;
        e_loss = gpt_agree_max(mg_test_max_rel(loss, ser_loss[1][0] + 6, 6, 0));
        e_w = gpt_agree_max(gpt_compare_weights(&tr.model, &s->model, &sum));
        snprintf(name, sizeof name, "llama: resume c=2 -> %s: iterations 7-12 = uninterrupted",
                 i == 0 ? "1 rank" : to);
        mg_test_report(tr.loaded_iteration == 6 && e_loss <= TOL && e_w <= TOL, name,
                       "loaded %lld, losses %.3g, weights %.3g (tol %.0e)",
                       (long long)tr.loaded_iteration, e_loss, e_w, TOL);
        mg_trainer_free(&tr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) gpt_rmtree(tmpl);
}

int main(int argc, char **argv) {
    int i, a, b;
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++)
        if (rows[i].world == world) check_row(&rows[i]);
    if (world <= 4) check_resume();
    if (world == 2) check_balance();
    {
        char line[2048];   /* the last --seq-length given counts */
        line_of(line, sizeof line, 0, 0, world == 2 ? "--context-parallel-size 2 --seq-length 6"
                : "--context-parallel-size 4 --seq-length 12", "");
        gpt_expect_error(&comm, "gpt2", "a sequence that does not cut into 2c chunks is refused",
                         line, world == 2 ? "--seq-length 6 is not divisible by 2 x "
                         "--context-parallel-size 2" : "--seq-length 12 is not divisible by 2 x "
                         "--context-parallel-size 4");
    }
    {
        char line[2048];
        line_of(line, sizeof line, 0, 0, "--context-parallel-size 2 --attention-backend unfused",
                "");
        gpt_expect_error(&comm, "gpt2", "the unfused attention with c > 1 is refused", line,
                         "--attention-backend unfused with --context-parallel-size 2");
    }
    for (a = 0; a < 2; a++)
        for (b = 0; b < 2; b++) if (have[a][b]) mg_trainer_free(&ser[a][b]);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
