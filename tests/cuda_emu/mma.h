/* mma.h — the CUDA emulator's warp matrix functions (nvcuda::wmma; tests/cuda_emu, README.md).
   Only the 16×16×16 shape with __half / __nv_bfloat16 inputs and float accumulators that the
   library uses. The fragment layout of a real device is opaque (which lane holds which element
   is unspecified), so code that is correct on a device touches fragments only through these
   functions; here every lane keeps the whole 16×16 matrix as float and computes the product
   itself. Each function is a warp-collective operation, as on a device: all 32 lanes must call
   it (the emulator's warp-divergence check fires otherwise), and it checks what a device
   requires — a 256-bit aligned pointer, ldm a multiple of 8 elements (16-bit) or 4 (float).
   Loads and the product start with a __syncwarp; store_matrix_sync is written by lane 0
   between two. Products of 16-bit inputs
   are exact in float; the sums run in float, k ascending (a device's order is unspecified). */
#ifndef MG_CUDA_EMU_MMA_H
#define MG_CUDA_EMU_MMA_H
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
void mg_emu_fault(const char *what);   /* a bug-finder report from device code */
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int m, int n, int k, class T, class Layout = void> class fragment {
    static_assert(m == 16 && n == 16 && k == 16, "the emulator has the 16x16x16 shape only");
public:
    float v[16][16];
};
static inline void mg_emu_wmma_check(const void *p, unsigned ldm, unsigned elem_bytes) {
    if ((uintptr_t)p % 32) mg_emu_fault("wmma: matrix pointer not 256-bit aligned");
    if ((ldm * elem_bytes) % 16) mg_emu_fault("wmma: ldm not a multiple of 16 bytes");
}
template <class Use, class T, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    __syncwarp();
    mg_emu_wmma_check(p, ldm, sizeof(T));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r][c] = (float)(__is_same(L, col_major) ? p[c * ldm + r] : p[r * ldm + c]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t layout) {
    __syncwarp();
    mg_emu_wmma_check(p, ldm, sizeof(float));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r][c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout) {
    __syncwarp();
    mg_emu_wmma_check(p, ldm, sizeof(float));
    if ((threadIdx.x & 31) == 0)
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.v[r][c];
    __syncwarp();
}
template <class Use, class T, class L>
__attribute__((no_sanitize("thread"))) static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float value) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = value;
}
/* The product touches only the calling lane's own fragments, never shared or global memory:
   left out of the race detector's instrumentation (it would count 3 accesses per
   multiply-add). The __syncwarp keeps the warp-collective check. */
template <class T, class LA, class LB>
__attribute__((no_sanitize("thread"))) static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    float out[16][16];
    __syncwarp();
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.v[r][n];
            for (int k = 0; k < 16; k++) s += a.v[r][k] * b.v[k][n];
            out[r][n] = s;
        }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) d.v[r][n] = out[r][n];
}
} /* namespace wmma */
} /* namespace nvcuda */
#endif /* MG_CUDA_EMU_MMA_H */
