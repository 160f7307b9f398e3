/* mma.h — the CUDA emulator's warp matrix functions (nvcuda::wmma, and the PTX instruction
   mma.sync m16n8k16 as mg_emu_mma16816; tests/cuda_emu, README.md).
   Only the 16×16×16 shape with __half / __nv_bfloat16 inputs and float accumulators that the
   library uses. The fragment layout of a real device is opaque (which lane holds which element
   is unspecified), so code that is correct on a device touches fragments only through these
   functions; here every lane keeps the whole 16×16 matrix as float and computes the product
   itself. Each function is a warp-collective operation, as on a device: all 32 lanes must call
   it (the emulator's warp-divergence check fires otherwise), and it checks what a device
   requires — a 256-bit aligned pointer, ldm a multiple of 8 elements (16-bit) or 4 (float).
   Loads and the product start with a __syncwarp; store_matrix_sync is written by lane 0
   between two. The shared-memory bank model leaves their accesses out (a device's are not
   these). Products of 16-bit inputs
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
    mg_emu_banks_pause(1);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r][c] = (float)(__is_same(L, col_major) ? p[c * ldm + r] : p[r * ldm + c]);
    mg_emu_banks_pause(0);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t layout) {
    __syncwarp();
    mg_emu_wmma_check(p, ldm, sizeof(float));
    mg_emu_banks_pause(1);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r][c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    mg_emu_banks_pause(0);
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout) {
    __syncwarp();
    mg_emu_wmma_check(p, ldm, sizeof(float));
    mg_emu_banks_pause(1);
    if ((threadIdx.x & 31) == 0)
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.v[r][c];
    mg_emu_banks_pause(0);
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
/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with D = C, the form
   mg_tensor.h's 64-row attention kernels issue (mg__mma16816): d[0..3] += A[16×16]·B[16×8] on
   the PTX ISA's register fragments ("Matrix Fragments for mma.m16n8k16 with floating point
   type"). With g = lane/4 and t = 2·(lane%4), and a 32-bit register holding two 16-bit
   elements, the lower column (or k) in its low half:
     A (row, k):  a[0] = (g, t…t+1)  a[1] = (g+8, t…)  a[2] = (g, t+8…)  a[3] = (g+8, t+8…)
     B (k, n):    b[0] = (t…t+1, g)  b[1] = (t+8…t+9, g)
     D (row, n):  d[0], d[1] = (g, t), (g, t+1)   d[2], d[3] = (g+8, t), (g+8, t+1)
   Warp-collective, as on a device: every lane of the warp calls it (the __syncwarps check).
   Each lane leaves its six registers in the warp's row of a per-block table (thread_local, as
   __shared__ is: one emulated block runs on one thread), and after a __syncwarp computes its
   own four outputs from the others'; a second __syncwarp keeps the table until all have read.
   The products of 16-bit inputs are exact in float; the sums run in float, k ascending (a
   device's order is unspecified). Left out of the race detector, like mma_sync above.      */
static thread_local uint32_t mg_emu_mma_regs[32][32][6];   /* [warp][lane][a0..a3, b0, b1] */
static inline float mg_emu_mma_half(uint32_t reg, int hi, int f16) {
    uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xFFFFu);
    return f16 ? mg_emu_f16_to_f32(h) : mg_emu_bf16_to_f32(h);
}
__attribute__((no_sanitize("thread"))) static inline void mg_emu_mma16816(float d[4], const uint32_t a[4],
                                                                          const uint32_t b[2], int f16) {
    unsigned tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned warp = tid / 32, lane = tid % 32, g = lane / 4, t = 2 * (lane % 4), src, i;
    float A[2][16], B[16][2];   /* this lane's rows g, g + 8 of A; columns t, t + 1 of B */
    __syncwarp();
    for (i = 0; i < 4; i++) mg_emu_mma_regs[warp][lane][i] = a[i];
    mg_emu_mma_regs[warp][lane][4] = b[0];
    mg_emu_mma_regs[warp][lane][5] = b[1];
    __syncwarp();
    for (src = 0; src < 32; src++) {
        const uint32_t *r = mg_emu_mma_regs[warp][src];
        unsigned gs = src / 4, ts = 2 * (src % 4), e;
        for (e = 0; e < 2; e++) {
            if (gs == g) {   /* A: rows g (a0, a2) and g + 8 (a1, a3) */
                A[0][ts + e] = mg_emu_mma_half(r[0], e, f16);
                A[1][ts + e] = mg_emu_mma_half(r[1], e, f16);
                A[0][ts + 8 + e] = mg_emu_mma_half(r[2], e, f16);
                A[1][ts + 8 + e] = mg_emu_mma_half(r[3], e, f16);
            }
            if (gs == t || gs == t + 1) {   /* B: column gs */
                B[ts + e][gs - t] = mg_emu_mma_half(r[4], e, f16);
                B[ts + 8 + e][gs - t] = mg_emu_mma_half(r[5], e, f16);
            }
        }
    }
    for (i = 0; i < 4; i++) {
        float s = d[i];
        int k;
        for (k = 0; k < 16; k++) s += A[i / 2][k] * B[k][i % 2];
        d[i] = s;
    }
    __syncwarp();
}
#endif /* MG_CUDA_EMU_MMA_H */
