/* tests/fuzz/fuzz_safetensors.c — mg_st_open on arbitrary bytes written to a file.
   On success: every tensor's bytes lie inside the file (and are all read), its byte count
   is numel × dtype size, the tensors tile the data buffer in order, every name is found
   again by mg_st_find, every metadata key by mg_st_meta. See fuzz_util.h.                   */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[MG_ERRLEN] = "";
    mg_st_file st;
    const char *path = mg_fuzz_path("x.safetensors");
    mg_fuzz_put(path, data, size);
    int rc = mg_st_open(path, &st, err, sizeof err);
    if (rc != 0) { mg_fuzz_check_error(rc, err); return 0; }
    const unsigned char *base = (const unsigned char *)st.mg__map;
    uint64_t hn;
    memcpy(&hn, data, 8);
    const unsigned char *at = base + 8 + hn;   /* where the data buffer starts */
    unsigned sum = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        const mg_st_tensor *t = &st.tensors[i];
        const unsigned char *p = (const unsigned char *)t->data;
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        MG_FUZZ_ASSERT(t->ndim >= 0 && t->ndim <= MG_ST_MAX_DIMS && numel == t->numel &&
                       t->nbytes == (size_t)numel * mg_st_dtype_size(t->dtype), "tensor %d shape", i);
        MG_FUZZ_ASSERT(p == at, "tensor %d does not start where the previous one ends", i);
        MG_FUZZ_ASSERT(p >= base && p + t->nbytes <= base + size, "tensor %d outside the file", i);
        for (size_t b = 0; b < t->nbytes; b++) sum += p[b];
        at = p + t->nbytes;
        const mg_st_tensor *f = mg_st_find(&st, t->name);
        MG_FUZZ_ASSERT(f == t, "mg_st_find('%s') finds another tensor", t->name);
    }
    MG_FUZZ_ASSERT(at == base + size, "tensors do not end at the end of the file");
    for (int m = 0; m < st.n_meta; m++)
        MG_FUZZ_ASSERT(mg_st_meta(&st, st.meta_keys[m]) != NULL, "metadata key %d", m);
    mg_st_close(&st);
    return (int)(sum & 0);
}
