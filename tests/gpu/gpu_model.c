/* gpu_model.c — the whole GPT model (GPT-2, and the Llama oracle's model) in fp32, bf16 and
   fp16 storage (and with selective and
   full recomputation) on the CUDA backend against the CPU backend's emulation of the same
   formats (real 16-bit storage, round-to-nearest-even, fp32 accumulation: the paths
   tests/test_mixed.c and tests/test_recompute.c check on the CPU). The oracle model of
   tests/oracle (the llm.c checkpoint tests/data/gpt_model.bin), 2 microbatches of 2 with
   hidden and attention dropout 0.1, one forward + backward: the summed loss and every
   parameter's gradient are compared (relative error per tensor against its RMS, as
   tests/test_model.c measures).
   Built by nvcc (build/gpu_model_cuda) and through the CUDA emulator (build/gpu_model_emu,
   tests/cuda_emu). On a GPU:
       make build/gpu_model_cuda && ./build/gpu_model_cuda
   gpu_model_cuda without a GPU compares two CPU contexts: every difference must then be
   exactly 0; gpu_model_emu always compares the emulated device with the CPU.
   Tolerances (NOT yet validated on a GPU — this program was written on a machine without
   one): loss relative 1e-5 (fp32), 2^-8 (bf16), 2^-11 (fp16) — the unit roundoff, since the
   two backends round the same fp32 values and differ only where an fp32 summation-order
   difference crosses a rounding boundary; gradients 1e-4 (fp32), 5e-2 (bf16), 1e-2 (fp16):
   a few ulps of the format, as tests/gpu/gpu_ops.c allows per op, grown by the ~12 ops a
   gradient passes through at this depth (2 layers) — or, when larger, the CPU's own distance
   between its 16-bit and fp32 gradients (measured each run: the Llama oracle's weights are
   10-25x GPT-2's and its fp16 gradients lie 2e-2 from fp32's). fp16 runs seed the backward
   with a loss scale of 1024, as fp16 training does, and unscale the gradients.            */
#include "../gpt_test_util.h"

static mg_ctx g_cpu, g_dev;

/* One forward + backward of the GPT-2 oracle model (llama: the Llama oracle's, RMSNorm, rope,
   GQA, SwiGLU, untied) on ctx; returns the loss sum, grads to host. */
static double run_model(mg_ctx *ctx, mg_dtype dt, int recompute, int llama, float **grads,
                        mg_gpt *out) {
    mg_gpt_config c = llama ? gpt_llama_config() : gpt_ref_config();
    mg_gpt_layout L;
    char err[MG_ERRLEN];
    int32_t samples[4 * 257];
    double loss;
    int i;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.dropout_seed = 7;
    L = mg_gpt_layout_single(&c, 2, 2, 1);
    L.dtype = dt;
    L.recompute_granularity = recompute;
    mg_arena_release(ctx, 0);
    if (mg_gpt_create(out, ctx, &c, &L, err, sizeof err)) {
        fprintf(stderr, "mg_gpt_create: %s\n", err);
        exit(1);
    }
    gpt_import(out, llama ? GPT_DATA "llama_model.safetensors" : GPT_DATA "gpt_model.bin", 0);
    for (i = 0; i < 2 * 2 * (c.seq_len + 1); i++) samples[i] = (i * 131 + 7) % c.vocab_size;
    out->training = 1;
    mg_gpt_zero_grad(out);
    /* fp16 as it trains: the backward seeded with a loss scale (1024) so that activation
       gradients stay above fp16's subnormals (2^-14), where a rounding difference of one
       subnormal ulp is a large relative error; the gradients compare relative to each other */
    loss = mg_gpt_run_microbatches(out, samples, 2, (dt == MG_F16 ? 1024.0f : 1.0f) /
                                                        (4.0f * (float)c.seq_len), 1);
    *grads = gpt_host(out, out->grad_buf);
    if (dt == MG_F16)   /* unscaled, as the optimizer would see them */
        for (i = 0; i < out->n_elems; i++) (*grads)[i] /= 1024.0f;
    return loss;
}

static void compare(mg_dtype dt, int recompute, int llama, double tol_loss, double tol_grad) {
    static const char *const rc_name[3] = {"", ", selective", ", full"};
    mg_gpt a, b;
    float *ga, *gb;
    double la = run_model(&g_cpu, dt, recompute, llama, &ga, &a), lb, e_loss, e_grad;
    int worst = 0;
    char name[200];
    lb = run_model(&g_dev, dt, recompute, llama, &gb, &b);
    e_loss = fabs(lb - la) / fabs(la);
    e_grad = gpt_all_err(&a, gb, ga, &worst);
    if (dt != MG_F32 && tol_grad > 0) {
        /* a 16-bit run's gradients may differ between the backends by as much as the format
           itself moves them from the fp32 run's (fp32 sums in another order flip 16-bit
           roundings, and each flip travels through the layers): the bound is the larger of
           tol_grad and the CPU's own 16-bit-vs-fp32 distance, measured here               */
        mg_gpt c32;
        float *g32;
        int w32 = 0;
        double e_fmt;
        run_model(&g_cpu, MG_F32, recompute, llama, &g32, &c32);
        e_fmt = gpt_all_err(&c32, ga, g32, &w32);
        if (e_fmt > tol_grad) tol_grad = e_fmt;
        free(g32);
        mg_gpt_destroy(&c32);
    }
    snprintf(name, sizeof name, "%s %s%s: loss", llama ? "llama" : "model", mg_dtype_name(dt),
             rc_name[recompute]);
    mg_test_report(e_loss <= tol_loss, name, "rel err %.3g, tol %.3g (cpu %.6f, dev %.6f)",
                   e_loss, tol_loss, la, lb);
    snprintf(name, sizeof name, "%s %s%s: gradients", llama ? "llama" : "model",
             mg_dtype_name(dt), rc_name[recompute]);
    mg_test_report(e_grad <= tol_grad, name, "max rel err %.3g at %s, tol %.3g", e_grad,
                   a.params[worst].name, tol_grad);
    free(ga);
    free(gb);
    mg_gpt_destroy(&a);
    mg_gpt_destroy(&b);
}

/* The optimizer on both backends after that forward + backward: mg_adamw_update (the norm,
   the clip and skip decisions and the fused AdamW, all on the device) with clipping engaged
   (clip 0.05) and, in fp16, the loss scale of 1024 divided out: the grad norm and the updated
   fp32 weights against the CPU's (tol_w relative to each tensor's RMS). Then an inf planted in
   one gradient: both backends skip (return 0, norm nan) and leave every weight bit for bit. */
static void optimizer(mg_dtype dt, double tol_norm, double tol_w) {
    mg_gpt mm[2];
    mg_adamw opt[2];
    float *g[2], *w[2], *w2[2], inf = INFINITY;
    double norm[2], e_norm, e_w;
    int rc[2], rc2[2], k, same = 1, worst = 0;
    char name[200];
    for (k = 0; k < 2; k++) {
        mg_ctx *ctx = k ? &g_dev : &g_cpu;
        double n2;
        run_model(ctx, dt, MG_RECOMPUTE_NONE, 0, &g[k], &mm[k]);
        /* eps 1e-3 keeps the first step's update g/(|g| + eps) Lipschitz (1/eps) in g, so
           gradient rounding differences do not flip a near-zero gradient's whole step */
        mg_adamw_create(&opt[k], &mm[k], 0.9f, 0.95f, 1e-3f, 0.1f);
        opt[k].loss_scale = dt == MG_F16 ? 1024.0 : 1.0;
        rc[k] = mg_adamw_update(&opt[k], &mm[k], 1e-3f, 0.05f, &norm[k]);
        w[k] = gpt_host(&mm[k], mg_gpt_fp32_params(&mm[k]));
        mg_copy_to_device(ctx, mm[k].grad_buf + 5, &inf, sizeof inf);
        rc2[k] = mg_adamw_update(&opt[k], &mm[k], 1e-3f, 0.05f, &n2);
        rc2[k] = rc2[k] == 0 && n2 != n2 && opt[k].step == 1;
        w2[k] = gpt_host(&mm[k], mg_gpt_fp32_params(&mm[k]));
        same &= memcmp(w[k], w2[k], sizeof(float) * (size_t)mm[k].n_elems) == 0;
    }
    e_norm = fabs(norm[1] - norm[0]) / norm[0];
    e_w = gpt_all_err(&mm[0], w[1], w[0], &worst);
    snprintf(name, sizeof name, "optimizer %s: fused AdamW step, clipped, on-device norm", mg_dtype_name(dt));
    mg_test_report(rc[0] && rc[1] && norm[0] > 0.05 && e_norm <= tol_norm && e_w <= tol_w, name,
                   "norm %.6g vs %.6g (rel err %.3g, tol %.3g), weights max rel err %.3g at %s "
                   "(tol %.3g)", norm[1], norm[0], e_norm, tol_norm, e_w, mm[0].params[worst].name,
                   tol_w);
    snprintf(name, sizeof name, "optimizer %s: an inf gradient skips the step on both backends, "
             "weights unchanged", mg_dtype_name(dt));
    mg_test_report(rc2[0] && rc2[1] && same, name, "");
    for (k = 0; k < 2; k++) {
        free(g[k]);
        free(w[k]);
        free(w2[k]);
        mg_gpt_destroy(&mm[k]);
    }
}

/* The trainer's step on the device: fp16 with dynamic loss scaling from 2^22 (the first
   iteration overflows fp16 and is skipped, the scale backs off; hysteresis 1, a growth window
   of 3), clipping, 8 iterations logged every 4, mg_trainer.defer_results as gpt_train runs it;
   on the device once as it is and once with --enable-cuda-graph (the optimizer step captured
   at iteration 1 and replayed). Against the CPU trainer: the logged loss, grad norm, learning
   rate and loss scale, and the skipped iterations. Under the emulator also the host
   synchronisations of each step (mg_emu_host_syncs): 0 on the iterations that do not log.  */
static void trainer_run(const char *device, const char *extra, mg_trainer *tr,
                        mg_step_result *r, long *syncs) {
    char line[1024];
    int i;
    snprintf(line, sizeof line, "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
             "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
             "--micro-batch-size 2 --global-batch-size 4 --train-iters 8 --lr 1e-3 "
             "--split 1,0,0 --eval-iters 0 --log-interval 4 --fp16 --initial-loss-scale "
             "4194304 --hysteresis 1 --loss-scale-window 3 --clip-grad 0.5 --device %s%s",
             device, extra);
    gpt_trainer_from_line(tr, line);
    tr->defer_results = 1;
    for (i = 0; i < 8; i++) {
#ifdef MG_CUDA_EMU
        long before = mg_emu_host_syncs();
#endif
        r[i] = mg_trainer_step(tr);
#ifdef MG_CUDA_EMU
        syncs[i] = mg_emu_host_syncs() - before;
#else
        syncs[i] = -1;
#endif
        mg_trainer_log(tr, &r[i], NULL);
    }
}
static void trainer_steps(int have_gpu) {
    static const char *const label[2] = {"", ", --enable-cuda-graph"};
    mg_trainer cpu, dev;
    mg_step_result rc[8], rd[8];
    long syncs[8];
    int g, i;
    trainer_run("cpu", "", &cpu, rc, syncs);
    for (g = 0; g < (have_gpu ? 2 : 1); g++) {
        char name[300];
        int ok_values = 1, ok_syncs = 1;
        double worst = 0;
        trainer_run(have_gpu ? "cuda" : "cpu", g ? " --enable-cuda-graph" : "", &dev, rd, syncs);
        for (i = 0; i < 8; i++) {
            int shows = (i + 1) % 4 == 0;
            if (rc[i].has_values != shows || rd[i].has_values != shows) ok_values = 0;
            if (!shows) {
                ok_syncs &= syncs[i] <= 0;   /* -1: not counted (a real GPU) */
                continue;
            }
            if (rd[i].skipped != rc[i].skipped || rd[i].loss_scale != rc[i].loss_scale ||
                rd[i].lr != rc[i].lr)
                ok_values = 0;
            if (!rc[i].skipped) {
                double e = fabs(rd[i].loss - rc[i].loss) / fabs(rc[i].loss), en =
                           fabs(rd[i].grad_norm - rc[i].grad_norm) / rc[i].grad_norm;
                if (en > e) e = en;
                if (e > worst) worst = e;
            }
        }
        snprintf(name, sizeof name, "trainer fp16 dynamic scaling on the device%s: logged loss, "
                 "grad norm, lr, loss scale and skipped iterations = the CPU trainer's", label[g]);
        mg_test_report(ok_values && cpu.skipped_iters >= 1 && dev.has_opt_graph == g &&
                       dev.skipped_iters == cpu.skipped_iters &&
                       dev.scaler.scale == cpu.scaler.scale &&
                       worst <= (have_gpu ? 1.0 / 2048 : 0), name,
                       "skipped %lld vs %lld, last scale %g vs %g, worst rel diff %.3g",
                       (long long)dev.skipped_iters, (long long)cpu.skipped_iters,
                       dev.scaler.scale, cpu.scaler.scale, worst);
        if (syncs[3] >= 0) {   /* counted: the emulator */
            snprintf(name, sizeof name, "trainer%s: 0 host synchronisations in the steps that do "
                     "not log", label[g]);
            mg_test_report(ok_syncs && syncs[3] > 0, name, "per iteration 1-8: %ld %ld %ld %ld "
                           "%ld %ld %ld %ld", syncs[0], syncs[1], syncs[2], syncs[3], syncs[4],
                           syncs[5], syncs[6], syncs[7]);
        }
        mg_trainer_free(&dev);
    }
    mg_trainer_free(&cpu);
}

int main(void) {
    mg_ctx_desc d;
    int have_gpu = mg_cuda_available(), k;
    memset(&d, 0, sizeof d);
    d.arena_bytes = (size_t)256 << 20;
    d.device = MG_DEVICE_CPU;
    mg_ctx_init(&g_cpu, &d);
    d.device = have_gpu ? MG_DEVICE_CUDA : MG_DEVICE_CPU;
    mg_ctx_init(&g_dev, &d);
    if (have_gpu) printf("# %s vs %s\n", mg_device_name(&g_dev), mg_device_name(&g_cpu));
    else
        printf("# no GPU: comparing two CPU contexts (checks this program, not CUDA)\n");
    for (k = 0; k < 3; k++) {
        mg_dtype dt = k == 0 ? MG_F32 : k == 1 ? MG_BF16 : MG_F16;
        double tl = !have_gpu ? 0 : k == 0 ? 1e-5 : k == 1 ? 1.0 / 256 : 1.0 / 2048;
        double tg = !have_gpu ? 0 : k == 0 ? 1e-4 : k == 1 ? 5e-2 : 1e-2;
        int llama;
        for (llama = 0; llama < 2; llama++) {
            compare(dt, MG_RECOMPUTE_NONE, llama, tl, tg);
            compare(dt, MG_RECOMPUTE_SELECTIVE, llama, tl, tg);
            compare(dt, MG_RECOMPUTE_FULL, llama, tl, tg);
        }
        optimizer(dt, !have_gpu ? 0 : k == 0 ? 1e-5 : tg, tg);
    }
    trainer_steps(have_gpu);
    mg_ctx_free(&g_dev);
    mg_ctx_free(&g_cpu);
    return mg_test_summary();
}
