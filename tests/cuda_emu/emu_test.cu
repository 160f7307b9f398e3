/* emu_test.cu — the CUDA emulator's own tests (build/emu_test; run by tests/run.sh).
   Correct kernels give CUDA's results with no report: thread/block coordinates, shared-memory
   reductions, every warp shuffle and vote, atomics, dynamic shared memory. Deliberately broken
   kernels are caught, each report naming kernel, block, thread and address: a missing
   __syncthreads, an off-by-one shared index, a wrong shuffle width, a shuffle mask naming
   lanes that do not exist, a barrier in divergent code, device writes past an allocation,
   reads of never-written device and shared memory, a host read of device memory. The shuffled
   thread order changes an order-dependent result. The shared-memory bank model counts the
   wavefronts of known access patterns.                                                     */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_failed;
static void check(int ok, const char *what, const char *detail) {
    printf("%s - %s%s%s\n", ok ? "ok" : "not ok", what, ok || !detail ? "" : ": ", ok || !detail ? "" : detail);
    if (!ok) g_failed++;
}
/* Runs the launch, then: the reports must contain every needle (none wanted: NULL). */
static void expect_reports(const char *what, const char *n1, const char *n2, const char *n3) {
    const char *r = mg_emu_reports();
    int ok = n1 ? (strstr(r, n1) && (!n2 || strstr(r, n2)) && (!n3 || strstr(r, n3)))
                : mg_emu_report_count() == 0;
    check(ok, what, r[0] ? r : "no report");
    mg_emu_clear_reports();
}
static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) { printf("not ok - cudaMalloc\n"); exit(1); }
    return p;
}

/* --- correct kernels ----------------------------------------------------------------------- */
__global__ void k_coords(int *out) {
    int t = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    int b = (int)(blockIdx.x + gridDim.x * blockIdx.y);
    int nt = (int)(blockDim.x * blockDim.y * blockDim.z);
    out[b * nt + t] = b * 1000 + t;
}
/* Block sum: butterfly in each warp, warp totals through shared memory (as mg__block_reduce). */
__global__ void k_block_sum(float *out, const float *in) {
    __shared__ float warp_sums[32];
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; w++) s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}
__global__ void k_warp_ops(int *out) {
    int l = threadIdx.x;
    out[0 * 32 + l] = __shfl_sync(0xFFFFFFFFu, l * 10, 31 - l);
    out[1 * 32 + l] = __shfl_up_sync(0xFFFFFFFFu, l * 10, 3);
    out[2 * 32 + l] = __shfl_down_sync(0xFFFFFFFFu, l * 10, 3, 16);
    out[3 * 32 + l] = __shfl_xor_sync(0xFFFFFFFFu, l * 10, 5, 8);
    out[4 * 32 + l] = (int)__ballot_sync(0xFFFFFFFFu, l % 3 == 0);
    out[5 * 32 + l] = __any_sync(0xFFFFFFFFu, l == 7) + 2 * __all_sync(0xFFFFFFFFu, l < 31);
    out[6 * 32 + l] = __syncthreads_count(l & 1);
}
/* mma.sync m16n8k16 (mg_emu_mma16816): each lane builds its fragments from row-major A [16][16]
   and B [16][8] (16-bit) by the PTX ISA's formulas (g = lane/4, t = 2·(lane%4)) and writes its
   four outputs of D = C + A·B where the formula for D puts them; C(r, n) = r − n. */
__global__ void k_mma16816(float *out, const uint16_t *A, const uint16_t *B, int f16) {
    int lane = threadIdx.x, g = lane / 4, t = 2 * (lane % 4), i;
    uint32_t a[4], b[2];
    float d[4];
    for (i = 0; i < 4; i++) {   /* a[i]: row g (+8 for odd i), columns t, t+1 (+8 for i >= 2) */
        int row = g + 8 * (i & 1), col = t + 8 * (i >> 1);
        a[i] = A[row * 16 + col] | (uint32_t)A[row * 16 + col + 1] << 16;
    }
    for (i = 0; i < 2; i++) {   /* b[i]: rows (k) t, t+1 (+8 for i = 1), column g */
        int k = t + 8 * i;
        b[i] = B[k * 8 + g] | (uint32_t)B[(k + 1) * 8 + g] << 16;
    }
    for (i = 0; i < 4; i++) d[i] = (float)((g + 8 * (i / 2)) - (t + i % 2));
    mg_emu_mma16816(d, a, b, f16);
    for (i = 0; i < 4; i++) out[(g + 8 * (i / 2)) * 8 + t + i % 2] = d[i];
}
__global__ void k_atomics(float *sum, unsigned int *word) {
    atomicAdd(sum, 1.0f);
    unsigned int old = *word, assumed;
    do { assumed = old; old = atomicCAS(word, assumed, assumed + 2u); } while (old != assumed);
}
/* 16-bit conversions in device code: ties to even, fp16 overflow to inf and subnormals. */
__global__ void k_convert(unsigned short *out, const float *in) {
    int i = threadIdx.x;
    out[i] = i < 4 ? __float2bfloat16(in[i]).__x : __float2half(in[i]).__x;
    if (i == 0) out[8] = (unsigned short)(__bfloat162float(__float2bfloat16(3.0f)) == 3.0f &&
                                          __half2float(__float2half(-2.5f)) == -2.5f);
}
__global__ void k_dynamic(float *out, int n) {
    MG_EMU_EXTERN_SHARED(float, buf);
    buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if ((int)threadIdx.x < n) out[threadIdx.x] = buf[n - 1 - threadIdx.x];
}

/* --- broken kernels -------------------------------------------------------------------------- */
__global__ void k_missing_sync(float *out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    /* missing __syncthreads() */
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
__global__ void k_off_by_one(float *out) {
    __shared__ float tile[32];
    tile[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x + 1];   /* thread 31 reads tile[32] */
}
__global__ void k_bad_width(float *out) {
    float v = (float)threadIdx.x;
    v += __shfl_xor_sync(0xFFFFFFFFu, v, 16, 24);   /* width must be a power of two */
    out[threadIdx.x] = v;
}
__global__ void k_mask_too_wide(float *out) {
    float v = (float)threadIdx.x;
    /* 48 threads: the second warp has lanes 0..15 only, the full mask names 16..31 too */
    v += __shfl_down_sync(0xFFFFFFFFu, v, 1);
    out[threadIdx.x] = v;
}
__global__ void k_divergent_barrier(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) __syncthreads();
    else v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
    out[threadIdx.x] = v;
}
/* Lanes exchange through shared memory after __syncwarp: ordered inside a warp only. */
__global__ void k_warp_sync(float *out, int cross) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = (float)t;
    __syncwarp();
    out[t] = s[cross ? (t + 32) % 64 : t ^ 1];
}
__global__ void k_past_end(float *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) p[i] = 1.0f;   /* <= : one element too many */
}
__global__ void k_read(float *out, const float *in) { out[threadIdx.x] = in[threadIdx.x]; }
/* cp.async: 64 threads each copy 16 bytes of src into shared memory. seen[t] is what thread t
   reads of its own destination before the wait (the copy is in flight: the zero it wrote
   first), out[t] the first float of thread (t + 1) % 64's chunk after the wait and a barrier. */
__global__ void k_cp_async(float *out, float *seen, const float *src) {
    __shared__ float4 s4[64];
    float *s = (float *)s4;
    int t = threadIdx.x;
    s[4 * t] = 0.0f;
    mg_emu_cp_async16(&s[4 * t], src + 4 * t);
    mg_emu_cp_async_commit();
    seen[t] = s[4 * t];
    mg_emu_cp_async_wait(0);
    __syncthreads();
    out[t] = s[4 * ((t + 1) % 64)];
}
/* ldmatrix x4: a 16 × 16 block of M (16-bit, rows 24 elements apart, M[r][c] = 32r + c) read
   as its four 8 × 8 quarters, lane l naming row l%16 at column 8·(l/16) (quarter q: rows
   8·(q%2) …, columns 8·(q/2) …), without and with .trans; lane l's register q goes to
   out[(trans·32 + l)·4 + q]. With misalign, lane 5 names an address 2 bytes on. */
__global__ void k_ldmatrix(uint32_t *out, int misalign) {
    __shared__ uint4 m4[16 * 3];
    uint16_t *m = (uint16_t *)m4;
    int l = threadIdx.x, tr, i;
    uint32_t r[4];
    if (l < 16)   /* lane l writes column l; columns 16–23 are padding, never read */
        for (i = 0; i < 16; i++) m[i * 24 + l] = (uint16_t)(32 * i + l);
    __syncthreads();
    for (tr = 0; tr < 2; tr++) {
        mg_emu_ldmatrix_x4(r, m + (l % 16) * 24 + (l / 16) * 8 + (misalign && l == 5), tr);
        for (i = 0; i < 4; i++) out[(tr * 32 + l) * 4 + i] = r[i];
    }
}
/* One warp-wide shared-memory access of a known bank pattern (the bank model, mode by mode;
   the stores that fill the array first are left out of the counts). */
__global__ void k_banks(float *out, int mode) {
    __shared__ float4 s4[32 * 33 / 4 + 8];
    float *s = (float *)s4;
    uint16_t *h = (uint16_t *)s4;
    int l = threadIdx.x, i;
    float v = 0.0f;
    uint32_t r[4] = {0, 0, 0, 0};
    mg_emu_banks_pause(1);
    for (i = l; i < 32 * 33 + 32; i += 32) s[i] = (float)i;
    mg_emu_banks_pause(0);
    __syncthreads();
    switch (mode) {
    case 0: v = s[l]; break;                       /* consecutive words: 1 wavefront */
    case 1: v = s[2 * l]; break;                   /* stride 2: 2-way */
    case 2: v = s[32 * l]; break;                  /* one bank: 32-way */
    case 3: v = s[33 * l]; break;                  /* a padded column: 1 */
    case 4: v = s[5]; break;                       /* one word: broadcast, 1 */
    case 5: { float4 x = s4[l]; v = x.x + x.w; break; }   /* 16 bytes a lane, consecutive: 4 */
    case 6: { float4 x = s4[2 * l]; v = x.y; break; }   /* 16-byte loads 32 bytes apart: 2-way */
    case 7: { float2 x = ((float2 *)s)[l]; v = x.x; break; }   /* 8 bytes, consecutive: 2 */
    case 8: mg_emu_ldmatrix_x4(r, h + (l % 16) * 32 + (l / 16) * 8, 0); break;   /* 64-byte rows */
    case 9: mg_emu_ldmatrix_x4(r, h + (l % 16) * 40 + (l / 16) * 8, 0); break;   /* 80-byte rows */
    case 10: if (l == 0) s[0] = 1.0f; break;        /* one lane: 1 */
    }
    out[l] = v + (float)(r[0] + r[3]);
}
/* One warp-wide global read of a known pattern (the sector model, mode by mode). */
__global__ void k_sectors(float *out, const float *g, int mode) {
    int l = threadIdx.x;
    float v = 0.0f;
    switch (mode) {
    case 0: v = g[l]; break;                        /* 128 aligned bytes: 4 sectors */
    case 1: v = g[2 * l]; break;                    /* stride 2: 8 for 4 */
    case 2: v = g[l + 1]; break;                    /* 128 bytes one word off: 5 for 4 */
    case 3: v = g[32 * l]; break;                   /* one word a line: 32 for 4 */
    case 4: { float4 x = ((const float4 *)g)[l]; v = x.y; break; }   /* 512 bytes: 16 */
    case 5: v = g[3]; break;                        /* one word: 1 */
    }
    out[l] = v;                                     /* and a store of 128 bytes: 4 */
}
/* A copy that no wait ever completes. */
__global__ void k_cp_async_unwaited(const float *src) {
    __shared__ float4 s4[1];
    float *s = (float *)s4;
    if (threadIdx.x == 0) {
        mg_emu_cp_async16(s, src);
        mg_emu_cp_async_commit();
    }
}
__global__ void k_uninit_shared(float *out) {
    __shared__ float acc[32];
    acc[threadIdx.x] += 1.0f;   /* never zeroed */
    out[threadIdx.x] = acc[threadIdx.x];
}
__global__ void k_last_writer(int *out) {
    __shared__ int who;
    who = (int)threadIdx.x;      /* every thread writes, no order between them */
    __syncthreads();
    if (threadIdx.x == 0) *out = who;
}

/* A 16-byte vector load from an address 4 bytes past a 16-byte boundary: a GPU faults
   ("misaligned address"); the emulated program stops at -fsanitize=alignment's report. */
__global__ void k_misaligned_float4(float *out, const float *in) {
    float4 v = *(const float4 *)(in + 1);
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (argc > 1 && !strcmp(argv[1], "--misaligned")) {   /* check.sh: must not return 0 */
        float *in = (float *)dev_alloc(8 * sizeof(float)), *out = (float *)dev_alloc(sizeof(float));
        cudaMemset(in, 0, 8 * sizeof(float));
        MG_LAUNCH(k_misaligned_float4, 1, 1, 0, 0, out, in);
        cudaDeviceSynchronize();
        printf("the misaligned float4 load was not stopped\n");
        return 0;
    }
    mg_emu_collect(1);
    check(cudaGetDeviceCount(&n_dev) == cudaSuccess && n_dev == 1, "one emulated device", NULL);

    { /* a block of 2048 threads is a configuration error, reported by cudaGetLastError */
        int *d = (int *)dev_alloc(4);
        MG_LAUNCH(k_coords, 1, 2048, 0, 0, d);
        cudaError_t e1 = cudaGetLastError(), e2 = cudaGetLastError();
        check(e1 == cudaErrorInvalidConfiguration && e2 == cudaSuccess, "2048 threads per block: "
              "cudaErrorInvalidConfiguration, once", cudaGetErrorName(e1));
    }
    { /* coordinates: grid (3,2), block (4,2,2) */
        int *d = (int *)dev_alloc(6 * 16 * sizeof(int)), h[96], ok = 1;
        MG_LAUNCH(k_coords, dim3(3, 2), dim3(4, 2, 2), 0, 0, d);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        for (int b = 0; b < 6; b++) for (int t = 0; t < 16; t++) ok &= h[b * 16 + t] == b * 1000 + t;
        check(ok, "threadIdx/blockIdx/blockDim/gridDim over a 2-D grid of 3-D blocks", NULL);
        expect_reports("coordinates: no report", NULL, NULL, NULL);
    }
    { /* block sums, 4 blocks of 256 */
        float h[1024], s[4], ref[4] = {0, 0, 0, 0};
        for (int i = 0; i < 1024; i++) { h[i] = (float)(i % 7) - 2.0f; ref[i / 256] += h[i]; }
        float *in = (float *)dev_alloc(sizeof h), *out = (float *)dev_alloc(sizeof s);
        cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
        MG_LAUNCH(k_block_sum, 4, 256, 0, 0, out, in);
        cudaMemcpy(s, out, sizeof s, cudaMemcpyDeviceToHost);
        check(!memcmp(s, ref, sizeof s), "block reduction: shuffles + shared memory + barrier", NULL);
        expect_reports("block reduction: no report", NULL, NULL, NULL);
    }
    { /* warp operations against CUDA's definitions */
        int h[7 * 32], ok = 1;
        int *d = (int *)dev_alloc(sizeof h);
        MG_LAUNCH(k_warp_ops, 1, 32, 0, 0, d);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        for (int l = 0; l < 32; l++) {
            ok &= h[l] == (31 - l) * 10;
            ok &= h[32 + l] == (l >= 3 ? l - 3 : l) * 10;
            ok &= h[64 + l] == ((l & 15) + 3 < 16 ? l + 3 : l) * 10;
            ok &= h[96 + l] == (l ^ 5) * 10;          /* xor 5 stays inside each group of 8 */
            ok &= (unsigned)h[128 + l] == 0x49249249u;
            ok &= h[160 + l] == 1;                     /* any: yes; all (< 31): no */
            ok &= h[192 + l] == 16;
        }
        check(ok, "__shfl_sync/_up/_down (width 16)/_xor (width 8), ballot, any, all, "
              "__syncthreads_count", NULL);
        expect_reports("warp operations: no report", NULL, NULL, NULL);
    }
    for (int f16 = 0; f16 < 2; f16++) { /* mma.sync m16n8k16 on the PTX fragment layouts */
        uint16_t ha[256], hb[128];
        float ref[128], got[128];
        int ok = 1;
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++) {   /* small integers: exact in bf16 and fp16 */
                float x = (float)((r * 3 + k * 5) % 7 - 3);
                ha[r * 16 + k] = f16 ? __half(x).__x : __nv_bfloat16(x).__x;
            }
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) {
                float x = (float)((k * 2 + n * 7) % 5 - 2);
                hb[k * 8 + n] = f16 ? __half(x).__x : __nv_bfloat16(x).__x;
            }
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                float s = (float)(r - n);
                for (int k = 0; k < 16; k++)
                    s += (float)((r * 3 + k * 5) % 7 - 3) * (float)((k * 2 + n * 7) % 5 - 2);
                ref[r * 8 + n] = s;
            }
        uint16_t *da = (uint16_t *)dev_alloc(sizeof ha), *db = (uint16_t *)dev_alloc(sizeof hb);
        float *dout = (float *)dev_alloc(sizeof got);
        cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
        cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
        MG_LAUNCH(k_mma16816, 1, 32, 0, 0, dout, da, db, f16);
        cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 128; i++) ok &= got[i] == ref[i];
        check(ok, f16 ? "mma.sync m16n8k16 fp16: D = C + A*B on the PTX fragment layouts"
                      : "mma.sync m16n8k16 bf16: D = C + A*B on the PTX fragment layouts", NULL);
        expect_reports("mma.sync m16n8k16: no report", NULL, NULL, NULL);
    }
    { /* atomics from 4 blocks of 128 */
        float zero = 0.0f, sum = 0.0f;
        unsigned int w = 0, wh = 0;
        float *ds = (float *)dev_alloc(4);
        unsigned int *dw = (unsigned int *)dev_alloc(4);
        cudaMemcpy(ds, &zero, 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dw, &w, 4, cudaMemcpyHostToDevice);
        MG_LAUNCH(k_atomics, 4, 128, 0, 0, ds, dw);
        cudaMemcpy(&sum, ds, 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&wh, dw, 4, cudaMemcpyDeviceToHost);
        check(sum == 512.0f && wh == 1024u, "atomicAdd and an atomicCAS loop from 512 threads", NULL);
        expect_reports("atomics: no race report", NULL, NULL, NULL);
    }
    { /* 16-bit types */
        const float in[8] = {1.0f, 1.00390625f, 1.01171875f, 1e30f, 1.00048828125f, 65520.0f,
                             1e-7f, 65504.0f};
        const unsigned short want[9] = {0x3F80, 0x3F80, 0x3F82, 0x714A, 0x3C00, 0x7C00, 0x0002,
                                        0x7BFF, 1};
        unsigned short got[9];
        float *din = (float *)dev_alloc(sizeof in);
        unsigned short *dout = (unsigned short *)dev_alloc(sizeof got);
        cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
        MG_LAUNCH(k_convert, 1, 8, 0, 0, dout, din);
        cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost);
        check(!memcmp(got, want, sizeof want), "__float2bfloat16/__float2half: ties to even, "
              "overflow to inf, subnormals; round trips", NULL);
        expect_reports("16-bit conversions: no report", NULL, NULL, NULL);
    }
    { /* events: the host time when the stream reaches them (at the call here); CUDA's errors */
        cudaStream_t st;
        cudaEvent_t a, b, never, untimed;
        float ms = -1.0f, junk = 0.0f;
        struct timespec nap = {0, 20000000};   /* 20 ms between the two records */
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        cudaEventCreate(&never);
        cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
        cudaEventRecord(a, st);
        nanosleep(&nap, NULL);
        cudaEventRecord(b, st);
        cudaEventRecord(untimed, st);
        cudaError_t e = cudaEventElapsedTime(&ms, a, b);
        check(e == cudaSuccess && ms >= 20.0f && ms < 2000.0f, "cudaEventElapsedTime of two "
              "events recorded 20 ms apart: >= 20 ms", cudaGetErrorName(e));
        check(cudaEventElapsedTime(&junk, a, never) == cudaErrorInvalidResourceHandle &&
              cudaEventElapsedTime(&junk, a, untimed) == cudaErrorInvalidResourceHandle,
              "cudaEventElapsedTime: an unrecorded or cudaEventDisableTiming event is "
              "cudaErrorInvalidResourceHandle", NULL);
        cudaEventDestroy(a); cudaEventDestroy(b); cudaEventDestroy(never);
        cudaEventDestroy(untimed); cudaStreamDestroy(st);
    }
    { /* dynamic shared memory */
        float h[40], ok = 1;
        float *d = (float *)dev_alloc(sizeof h);
        MG_LAUNCH(k_dynamic, 1, 40, 40 * sizeof(float), 0, d, 40);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 40; i++) ok = ok && h[i] == (float)(39 - i);
        check(ok, "dynamic shared memory of the launch's size", NULL);
        expect_reports("dynamic shared memory: no report", NULL, NULL, NULL);
        MG_LAUNCH(k_dynamic, 1, 40, 39 * sizeof(float), 0, d, 40);
        expect_reports("dynamic shared memory: a write past the launch's bytes is caught",
                       "out-of-bounds shared memory write in kernel k_dynamic block (0,0,0) "
                       "thread (39,0,0)", "byte 156 of the dynamic shared memory (156 bytes", NULL);
    }

    float *out = (float *)dev_alloc(64 * sizeof(float));
    cudaMemset(out, 0, 64 * sizeof(float));
    MG_LAUNCH(k_missing_sync, 1, 64, 0, 0, out);
    expect_reports("missing __syncthreads: the race is caught",
                   "shared memory race in kernel k_missing_sync block (0,0,0) thread (",
                   "'k_missing_sync::s' + ", "since the last __syncthreads");
    MG_LAUNCH(k_warp_sync, 1, 64, 0, 0, out, 0);
    expect_reports("__syncwarp orders shared accesses of one warp: no report", NULL, NULL, NULL);
    MG_LAUNCH(k_warp_sync, 1, 64, 0, 0, out, 1);
    expect_reports("__syncwarp does not order two warps: the race is caught",
                   "shared memory race in kernel k_warp_sync block (0,0,0) thread (0,0,0): read",
                   "'k_warp_sync::s' + 128; thread (32,0,0) wrote it", NULL);
    MG_LAUNCH(k_off_by_one, 1, 32, 0, 0, out);
    expect_reports("off-by-one shared index: caught",
                   "shared memory read in kernel k_off_by_one block (0,0,0) thread (31,0,0)",
                   "'k_off_by_one::tile' + 128", NULL);
    MG_LAUNCH(k_bad_width, 1, 32, 0, 0, out);
    expect_reports("shuffle width 24: caught",
                   "__shfl_xor_sync in kernel k_bad_width block (0,0,0) thread (0,0,0): width 24 "
                   "is not a power of two", NULL, NULL);
    MG_LAUNCH(k_mask_too_wide, 1, 48, 0, 0, out);
    expect_reports("full shuffle mask in a 16-lane warp: caught",
                   "__shfl_down_sync in kernel k_mask_too_wide block (0,0,0) thread (32,0,0): "
                   "the mask 0xffffffff names lane 16, which does not exist", NULL, NULL);
    MG_LAUNCH(k_divergent_barrier, 1, 32, 0, 0, out);
    expect_reports("__syncthreads in divergent code: the deadlock is caught",
                   "deadlock in kernel k_divergent_barrier block (0,0,0)", "16 of 32 live threads "
                   "wait at __syncthreads", NULL);
    {
        float *p = (float *)dev_alloc(100 * sizeof(float));
        MG_LAUNCH(k_past_end, 2, 64, 0, 0, p, 100);
        expect_reports("device write one past the end: caught",
                       "out-of-bounds device memory write in kernel k_past_end block (1,0,0) "
                       "thread (36,0,0)", "0 bytes after the end of cudaMalloc #", "(400 bytes)");
        float *fresh = (float *)dev_alloc(32 * sizeof(float));
        MG_LAUNCH(k_read, 1, 32, 0, 0, out, fresh);
        expect_reports("read of never-written device memory: caught",
                       "uninitialised device memory read in kernel k_read block (0,0,0) thread "
                       "(0,0,0)", "byte 0 of cudaMalloc #", NULL);
        cudaFree(fresh);
        MG_LAUNCH(k_read, 1, 32, 0, 0, out, fresh);
        expect_reports("read of freed device memory: caught",
                       "use-after-free device memory read in kernel k_read", NULL, NULL);
        volatile float host_read = p[3];   /* a host dereference of a device pointer */
        (void)host_read;
        expect_reports("host read of device memory: caught", "host code reads 4 bytes of device "
                       "address", "byte 12 of cudaMalloc #", NULL);
    }
    { /* cp.async: a copy lands at the wait that completes its group */
        float h[256], got[64], seen[64];
        int ok = 1;
        for (int i = 0; i < 256; i++) h[i] = (float)(i + 1);
        float *src = (float *)dev_alloc(sizeof h), *out = (float *)dev_alloc(sizeof got);
        float *dseen = (float *)dev_alloc(sizeof seen);
        cudaMemcpy(src, h, sizeof h, cudaMemcpyHostToDevice);
        MG_LAUNCH(k_cp_async, 1, 64, 0, 0, out, dseen, src);
        cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
        cudaMemcpy(seen, dseen, sizeof seen, cudaMemcpyDeviceToHost);
        for (int t = 0; t < 64; t++) ok &= got[t] == h[4 * ((t + 1) % 64)] && seen[t] == 0.0f;
        check(ok, "cp.async: the destination holds the old bytes until cp.async.wait_group, the "
              "copy after it and a barrier", NULL);
        expect_reports("cp.async: no report", NULL, NULL, NULL);
        MG_LAUNCH(k_cp_async_unwaited, 1, 32, 0, 0, src);
        expect_reports("cp.async never waited for: caught", "cp.async copies still in flight when "
                       "kernel k_cp_async_unwaited block (0,0,0) thread (0,0,0) ended", NULL, NULL);
    }
    { /* ldmatrix x4, plain and transposing, on the PTX fragment layout */
        uint32_t got[256];
        int ok = 1;
        uint32_t *dout = (uint32_t *)dev_alloc(sizeof got);
        MG_LAUNCH(k_ldmatrix, 1, 32, 0, 0, dout, 0);
        cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost);
        for (int tr = 0; tr < 2; tr++)
            for (int l = 0; l < 32; l++)
                for (int q = 0; q < 4; q++)
                    for (int h = 0; h < 2; h++) {   /* the element in half h of register q */
                        int row = 8 * (q % 2) + (tr ? 2 * (l % 4) + h : l / 4);
                        int col = 8 * (q / 2) + (tr ? l / 4 : 2 * (l % 4) + h);
                        ok &= (got[(tr * 32 + l) * 4 + q] >> (16 * h) & 0xFFFFu) == (uint32_t)(32 * row + col);
                    }
        check(ok, "ldmatrix x4: the four 8x8 quarters in the PTX fragment layout, plain and .trans",
              NULL);
        expect_reports("ldmatrix: no report", NULL, NULL, NULL);
        MG_LAUNCH(k_ldmatrix, 1, 32, 0, 0, dout, 1);
        expect_reports("ldmatrix with a row address not 16-byte aligned: caught",
                       "ldmatrix in kernel k_ldmatrix block (0,0,0) thread (5,0,0)",
                       "must be 16-byte aligned shared memory", NULL);
    }
    { /* the shared-memory bank model: requests, wavefronts and ideal of each pattern */
        static const long want[11][2] = {{1, 1}, {2, 1}, {32, 1}, {1, 1}, {1, 1}, {4, 4}, {8, 4},
                                         {2, 2}, {16, 4}, {4, 4}, {1, 1}};
        static const char *what[11] = {
            "consecutive words", "stride 2 words: 2-way", "stride 32: 32-way", "stride 33: "
            "conflict free", "one word (broadcast)", "consecutive 16-byte loads: 4 quarter-warps",
            "16-byte loads 32 bytes apart: 2-way per quarter", "consecutive 8-byte loads: 2 "
            "half-warps", "ldmatrix x4 on 64-byte rows: 4-way per matrix", "ldmatrix x4 on "
            "80-byte rows: conflict free", "a store by one lane"};
        mg_emu_banks(1);
        for (int mode = 0; mode < 11; mode++) {
            long r0 = 0, w0 = 0, i0 = 0, r1 = 0, w1 = 0, i1 = 0;
            char got[200], name[160];
            mg_emu_bank_counts("k_banks", &r0, &w0, &i0);
            MG_LAUNCH(k_banks, 1, 32, 0, 0, out, mode);
            int counted = mg_emu_bank_counts("k_banks", &r1, &w1, &i1);
            snprintf(got, sizeof got, "%ld requests, %ld wavefronts, ideal %ld (want 1, %ld, %ld)",
                     r1 - r0, w1 - w0, i1 - i0, want[mode][0], want[mode][1]);
            snprintf(name, sizeof name, "bank model: %s: %ld wavefronts, ideal %ld", what[mode],
                     want[mode][0], want[mode][1]);
            check(counted && r1 - r0 == 1 && w1 - w0 == want[mode][0] && i1 - i0 == want[mode][1],
                  name, got);
        }
        mg_emu_banks(0);
        expect_reports("bank model: no report", NULL, NULL, NULL);
    }
    { /* the global-memory sector model: each pattern's read, then the 4-sector store */
        static const long want[6] = {4, 8, 5, 32, 16, 1}, ideal[6] = {4, 4, 4, 4, 16, 1};
        static const char *what[6] = {
            "consecutive words: 4 sectors, ideal 4", "stride 2 words: 8 sectors, ideal 4",
            "consecutive words one word off alignment: 5 sectors, ideal 4",
            "one word every 128 bytes: 32 sectors, ideal 4",
            "consecutive 16-byte loads: 16 sectors, ideal 16", "one word (broadcast): 1 sector"};
        float *g = (float *)dev_alloc(32 * 33 * sizeof(float)), *o = (float *)dev_alloc(32 * sizeof(float));
        cudaMemset(g, 0, 32 * 33 * sizeof(float));
        mg_emu_sectors(1);
        for (int mode = 0; mode < 6; mode++) {
            long r0 = 0, s0 = 0, i0 = 0, r1 = 0, s1 = 0, i1 = 0;
            char got[200], name[120];
            mg_emu_sector_counts("k_sectors", &r0, &s0, &i0);
            MG_LAUNCH(k_sectors, 1, 32, 0, 0, o, g, mode);
            int counted = mg_emu_sector_counts("k_sectors", &r1, &s1, &i1);
            snprintf(got, sizeof got, "%ld requests, %ld sectors, ideal %ld (want 2, %ld, %ld)",
                     r1 - r0, s1 - s0, i1 - i0, want[mode] + 4, ideal[mode] + 4);
            snprintf(name, sizeof name, "sector model: %s", what[mode]);
            check(counted && r1 - r0 == 2 && s1 - s0 == want[mode] + 4 && i1 - i0 == ideal[mode] + 4,
                  name, got);
        }
        mg_emu_sectors(0);
        expect_reports("sector model: no report", NULL, NULL, NULL);
    }
    MG_LAUNCH(k_uninit_shared, 1, 32, 0, 0, out);
    expect_reports("shared accumulator never zeroed: caught",
                   "uninitialised shared memory read in kernel k_uninit_shared block (0,0,0) "
                   "thread (0,0,0)", "'k_uninit_shared::acc' + 0", NULL);
    {
        int *d = (int *)dev_alloc(4), in_order = -1, shuffled = -1;
        MG_LAUNCH(k_last_writer, 1, 256, 0, 0, d);
        cudaMemcpy(&in_order, d, 4, cudaMemcpyDeviceToHost);
        expect_reports("every thread writing one shared word: the race is caught",
                       "shared memory race in kernel k_last_writer block (0,0,0) thread (1,0,0): "
                       "write of 4 bytes", "thread (0,0,0) wrote it", NULL);
        mg_emu_set_shuffle(7);
        MG_LAUNCH(k_last_writer, 1, 256, 0, 0, d);
        cudaMemcpy(&shuffled, d, 4, cudaMemcpyDeviceToHost);
        mg_emu_set_shuffle(0);
        mg_emu_clear_reports();
        char why[64];
        snprintf(why, sizeof why, "last writer %d in order, %d shuffled", in_order, shuffled);
        check(in_order == 255 && shuffled != 255, "shuffled thread order changes an "
              "order-dependent result", why);
    }
    { /* stream capture: launches and a memset recorded, not run; the graph replays them in
         order with the arguments of the capture; a synchronisation or a host copy inside a
         capture fails (cudaErrorStreamCaptureUnsupported) and invalidates it; host syncs count */
        cudaStream_t st;
        cudaGraph_t g = NULL, bad = NULL;
        cudaGraphExec_t x = NULL;
        int *d = (int *)dev_alloc(96 * sizeof(int)), h[96], first = -1, ok = 1, one = 1;
        long syncs;
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        cudaMemset(d, 0, 96 * sizeof(int));
        ok &= cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        ok &= cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive;
        cudaMemsetAsync(d, 0xFF, 96 * sizeof(int), st);
        MG_LAUNCH(k_coords, dim3(3, 2), dim3(4, 2, 2), 0, st, d);
        ok &= cudaStreamEndCapture(st, &g) == cudaSuccess && g;
        cudaMemcpy(&first, d, sizeof first, cudaMemcpyDeviceToHost);
        ok &= first == 0;                                   /* nothing ran at capture */
        ok &= cudaGraphInstantiate(&x, g, 0) == cudaSuccess;
        cudaGraphDestroy(g);                                /* the exec keeps its own copy */
        for (int rep = 0; rep < 2; rep++) {
            cudaMemset(d, 0, 96 * sizeof(int));
            ok &= cudaGraphLaunch(x, st) == cudaSuccess;
            cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
            for (int b = 0; b < 6; b++) for (int t = 0; t < 16; t++) ok &= h[b * 16 + t] == b * 1000 + t;
        }
        cudaGraphExecDestroy(x);
        check(ok, "stream capture: a memset and a kernel recorded, not run; the graph replays "
              "them (twice, after its cudaGraph_t is destroyed)", NULL);
        cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        syncs = mg_emu_host_syncs();
        ok = cudaStreamSynchronize(st) == cudaErrorStreamCaptureUnsupported &&
             cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, st) ==
                 cudaErrorStreamCaptureUnsupported &&
             mg_emu_host_syncs() == syncs &&
             cudaStreamEndCapture(st, &bad) == cudaErrorStreamCaptureInvalidated && !bad;
        check(ok, "stream capture: a synchronisation or a host copy inside it fails and "
              "invalidates the capture", NULL);
        syncs = mg_emu_host_syncs();
        cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, st);   /* staged: no wait */
        cudaMemcpyAsync(&one, d, sizeof one, cudaMemcpyDeviceToHost, st);   /* waits */
        cudaStreamSynchronize(st);
        check(mg_emu_host_syncs() - syncs == 2, "host synchronisations counted: a copy to the "
              "host and a stream synchronisation, not a copy to the device", NULL);
        cudaStreamDestroy(st);
        expect_reports("stream capture: no report", NULL, NULL, NULL);
    }
    printf("%s\n", g_failed ? "emu_test: FAILED" : "emu_test: all passed");
    return g_failed != 0;
}
