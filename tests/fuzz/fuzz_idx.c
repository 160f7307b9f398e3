/* tests/fuzz/fuzz_idx.c — a Megatron indexed dataset (PREFIX.idx + PREFIX.bin) through
   mg_dataset_open, then a sampler over it.
   Input layout: 8 bytes of sampler parameters (see mg_fuzz_check_dataset), a little-endian
   uint32 L, then L bytes of .idx (clamped to what is there) and the rest as .bin.
   tests/fuzz/seeds.py builds seeds from the fixtures in this layout. See fuzz_util.h.       */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char params[8] = {0};
    uint32_t idx_len = 0;
    if (size < 12) return 0;
    memcpy(params, data, 8);
    memcpy(&idx_len, data + 8, 4);
    data += 12;
    size -= 12;
    if (idx_len > size) idx_len = (uint32_t)size;
    mg_fuzz_put(mg_fuzz_path("d.idx"), data, idx_len);
    mg_fuzz_put(mg_fuzz_path("d.bin"), data + idx_len, size - idx_len);
    char err[MG_ERRLEN] = "";
    mg_dataset ds;
    int rc = mg_dataset_open(mg_fuzz_path("d"), &ds, err, sizeof err);
    if (rc != 0) { mg_fuzz_check_error(rc, err); return 0; }
    MG_FUZZ_ASSERT(ds.format == MG_DATA_INDEXED, "format");
    mg_fuzz_check_dataset(&ds, params);
    mg_dataset_close(&ds);
    return 0;
}
