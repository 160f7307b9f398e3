/* tests/fuzz/fuzz_llmc.c — one file through both llm.c readers: mg_dataset_open (token
   files, and the format sniffing that tells them from checkpoints and Megatron files) and
   mg_llmc_open (GPT-2 checkpoints). An opened token file also runs a sampler, its
   parameters taken from header bytes 12..19 (unused by the format, so the fuzzer varies
   them freely). An opened checkpoint has all its parameter bytes read. See fuzz_util.h.     */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[MG_ERRLEN] = "";
    const char *path = mg_fuzz_path("llmc.bin");
    mg_fuzz_put(path, data, size);

    mg_dataset ds;
    int rc = mg_dataset_open(path, &ds, err, sizeof err);
    if (rc != 0) {
        mg_fuzz_check_error(rc, err);
    } else {
        unsigned char params[8] = {0};
        if (size >= 20) memcpy(params, data + 12, 8);
        mg_fuzz_check_dataset(&ds, params);
        mg_dataset_close(&ds);
    }

    mg_llmc_checkpoint ck;
    err[0] = 0;
    rc = mg_llmc_open(path, &ck, err, sizeof err);
    if (rc != 0) { mg_fuzz_check_error(rc, err); return 0; }
    size_t bytes = (size_t)ck.n_params * mg_st_dtype_size(ck.dtype);
    const unsigned char *p = (const unsigned char *)ck.data;
    unsigned sum = 0;
    MG_FUZZ_ASSERT(MG_LLMC_HEADER_BYTES + bytes == size, "parameters do not fill the file");
    for (size_t b = 0; b < bytes; b++) sum += p[b];
    const mg_llmc_param *last = &ck.params[MG_LLMC_NPARAMS - 1];
    MG_FUZZ_ASSERT(last->offset + last->numel == ck.n_params, "layout");
    mg_llmc_close(&ck);
    return (int)(sum & 0);
}
