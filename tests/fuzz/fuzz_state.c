/* tests/fuzz/fuzz_state.c — the trainer's own small files, on arbitrary bytes: a checkpoint's
   state.json (mg__read_state) and latest_checkpointed_iteration.txt (mg__latest_iteration),
   both private to megatron.h, which this harness compiles whole (one rank, no MPI: needs
   OpenBLAS and OpenMP; tests/fuzz/run.sh adds the flags). config.json is fuzz_json's.
   On success every value must be in the range the reader promises (so nothing read can wrap
   an int later); on failure, one line. See fuzz_util.h for the conventions.               */
#include "fuzz_util.h"
#include "megatron.h"

/* DIR/latest_checkpointed_iteration.txt, DIR/release/model.safetensors (present, so that
   'release' is accepted) and DIR/iter_0000001/state.json in the scratch directory.         */
static const char *dir, *latest, *state;
static void setup(void) {
    char path[200];
    if (dir) return;
    dir = mg_fuzz_path("ckpt");
    if (mkdir(dir, 0755) != 0) abort();
    dir = strdup(dir);
    snprintf(path, sizeof path, "%s/release", dir);
    if (mkdir(path, 0755) != 0) abort();
    snprintf(path, sizeof path, "%s/release/model.safetensors", dir);
    mg_fuzz_put(path, "", 0);
    snprintf(path, sizeof path, "%s/iter_0000001", dir);
    if (mkdir(path, 0755) != 0) abort();
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    latest = strdup(path);
    snprintf(path, sizeof path, "%s/iter_0000001/state.json", dir);
    state = strdup(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[MG_ERRLEN] = "";
    int64_t iter = -1;
    mg__ckpt_state st;
    int rc, k;
    setup();

    /* the bytes as latest_checkpointed_iteration.txt */
    mg_fuzz_put(latest, data, size);
    rc = mg__latest_iteration(dir, &iter, err, sizeof err);
    if (rc < 0) {
        mg_fuzz_check_error(rc, err);
    } else {
        MG_FUZZ_ASSERT(rc == 1 || rc == 2, "rc %d for an existing file", rc);
        MG_FUZZ_ASSERT(iter >= 0 && (rc == 1 || iter == 0), "iteration %lld (rc %d)",
                       (long long)iter, rc);
        MG_FUZZ_ASSERT(size <= MG__LATEST_MAX_BYTES, "a %zu-byte file accepted", size);
        if (rc == 1)   /* only blanks and digits: nothing else may parse as a number */
            for (size_t i = 0; i < size; i++)
                MG_FUZZ_ASSERT(strchr(" \t\r\n0123456789-", data[i]) && data[i], "byte %zu", i);
    }

    /* the bytes as the state.json of iteration 1 */
    err[0] = 0;
    memset(&st, 0xab, sizeof st);
    mg_fuzz_put(state, data, size);
    rc = mg__read_state(state, 1, &st, err, sizeof err);
    if (rc != 0) {
        mg_fuzz_check_error(rc, err);
    } else {
        MG_FUZZ_ASSERT(st.iteration == 1 && st.consumed >= 0 && st.consumed_valid >= 0 &&
                       st.adam_step >= 0 && st.skipped >= 0 && st.nan_iters >= 0,
                       "counters");
        MG_FUZZ_ASSERT(st.seed >= 0 && st.seed <= 4294967295LL, "seed %lld", (long long)st.seed);
        MG_FUZZ_ASSERT(st.data_order == MG_ORDER_SHUFFLED || st.data_order == MG_ORDER_SEQUENTIAL,
                       "data order %d", st.data_order);
        for (k = 0; k < 6; k++)
            MG_FUZZ_ASSERT(st.arch[k] >= 1 && st.arch[k] <= INT32_MAX, "%s = %lld",
                           mg__state_arch_keys[k], (long long)st.arch[k]);
        if (st.has_scaler)
            MG_FUZZ_ASSERT(st.loss_scale > 0 && isfinite(st.loss_scale) &&
                           st.growth_tracker >= 0 && st.hysteresis_tracker >= -1000000000000000LL,
                           "scaler");
    }
    return 0;
}
