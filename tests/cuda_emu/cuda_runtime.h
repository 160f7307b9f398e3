/* cuda_runtime.h — the CUDA emulator's runtime header (tests/cuda_emu; see its README.md).

   CUDA source compiled by g++ instead of nvcc, run on the CPU: the emulated build passes
       g++ -x c++ -DMG_CUDA_EMU -D__CUDACC__ -I tests/cuda_emu -include cuda_runtime.h \
           -fsanitize=thread --param tsan-instrument-func-entry-exit=0 …
   and links build/obj/cuda_emu.o (tests/cuda_emu/cuda_emu.cpp, compiled without the sanitizer
   flags). `-include` does what nvcc does (it includes cuda_runtime.h in every .cu first), so
   __host__/__device__ exist before any header uses them. __CUDACC__ makes the library take its
   CUDA path; __CUDA_ARCH__ stays undefined (MG_HD functions take their host branch: there is
   one compilation, and it runs on the host).

   Kernels run block after block; the threads of a block are fibers switched only at
   __syncthreads and warp operations. The sanitizer flag makes the compiler call the emulator
   (__tsan_read4(addr) …) at every load and store (no sanitizer runtime is linked), which
   checks device and shared addresses (bounds, uninitialised reads, shared-memory races): the
   bug finders.                                                                              */
#ifndef MG_CUDA_EMU_RUNTIME_H
#define MG_CUDA_EMU_RUNTIME_H

#if !defined(MG_CUDA_EMU) || !defined(__cplusplus)
#error "tests/cuda_emu/cuda_runtime.h is the CUDA emulator: compile as C++ with -DMG_CUDA_EMU (see tests/cuda_emu/README.md)"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <tuple>         /* before the qualifier macros below, which the C++ headers trip on */
#include <type_traits>
#include <utility>

/* --- qualifiers ------------------------------------------------------------------------------
   One compilation serves host and device. A __shared__ variable is a thread_local static: the
   block's fibers run on one host thread, so they share it, and the emulator finds every
   __shared__ variable (name, offset, size) in the executable's TLS segment and symbol table. */
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict

/* --- built-in vector types and variables ---------------------------------------------------- */
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    operator uint3() const { uint3 r = {x, y, z}; return r; }
};
#define MG_EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; \
    static inline N make_##N(T x, T y) { N r = {x, y}; return r; }
#define MG_EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
    static inline N make_##N(T x, T y, T z, T w) { N r = {x, y, z, w}; return r; }
MG_EMU_VEC2(float, float2, 8)
MG_EMU_VEC4(float, float4, 16)
MG_EMU_VEC2(int, int2, 8)
MG_EMU_VEC4(int, int4, 16)
MG_EMU_VEC2(unsigned int, uint2, 8)
MG_EMU_VEC4(unsigned int, uint4, 16)
MG_EMU_VEC2(double, double2, 16)
#undef MG_EMU_VEC2
#undef MG_EMU_VEC4

/* The running fiber's coordinates; the scheduler rewrites them at every switch (a switch only
   happens inside an emulator call, so compiled code reloads them after it).                 */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

/* --- runtime API: the calls the library makes, with CUDA's signatures ---------------------- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901
} cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
typedef enum cudaDataType_t {
    CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14
} cudaDataType;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int major, minor, multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream = 0);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream = 0);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
/* Kernel attributes: only the dynamic shared memory opt-in. As on a device, a launch with more
   than 48 KiB of dynamic shared memory fails (cudaErrorInvalidConfiguration) unless the
   kernel was given at least that much with cudaFuncAttributeMaxDynamicSharedMemorySize;
   values above 227 KiB (an H100's opt-in limit) are refused (cudaErrorInvalidValue).      */
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
cudaError_t mg_emu_func_set_attribute(const void *fn, enum cudaFuncAttribute attr, int value);
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value) {
    return mg_emu_func_set_attribute(reinterpret_cast<const void *>(entry), attr, value);
}
/* Stream capture and graphs: while a stream captures, its kernel launches, memsets and
   device-to-device copies are recorded (a launch's arguments copied then, as CUDA copies them)
   instead of run; cudaGraphLaunch runs the recorded work in order on the stream it is given.
   What CUDA refuses inside a capture fails here too (a synchronisation, a copy from or to the
   host: cudaErrorStreamCaptureUnsupported, the capture then invalidated); cuBLAS and NCCL
   calls on a capturing stream are not emulated (the program stops with a message).        */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pStatus);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* --- the emulator's own interface ---------------------------------------------------------- */
typedef void (*mg_emu_body_fn)(void *closure);
/* Runs kernel `name` (its body: closure called once per thread) over grid × block. */
void mg_emu_launch_raw(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                       cudaStream_t stream, mg_emu_body_fn body, void *closure);
/* A launch on a capturing stream: recorded with a heap copy of its closure (freed by
   free_closure when the last graph holding it goes).                                        */
int mg_emu_capturing(cudaStream_t stream);
void mg_emu_capture_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, mg_emu_body_fn body, void *closure,
                           void (*free_closure)(void *));
template <class F>
static inline void mg_emu_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                                 cudaStream_t stream, F body) {
    if (mg_emu_capturing(stream)) {
        mg_emu_capture_launch(name, grid, block, shared_bytes, stream,
                              [](void *c) { (*(F *)c)(); }, (void *)new F(body),
                              [](void *c) { delete (F *)c; });
        return;
    }
    mg_emu_launch_raw(name, grid, block, shared_bytes, stream,
                      [](void *c) { (*(F *)c)(); }, (void *)&body);
}
/* The library's launch macro (mg_tensor.h): the arguments are evaluated once, on the host, at
   the launch, and their values kept in the closure (a tuple), as <<<…>>> copies them into the
   kernel's parameter space — so a launch recorded by a stream capture and replayed later sees
   the values of the launch, not the variables' later ones.                                 */
template <class F, class... A> struct mg_emu_bound {
    F f;
    std::tuple<A...> args;
    void operator()() { std::apply(f, args); }
};
template <class F, class... A>
static inline mg_emu_bound<F, typename std::decay<A>::type...> mg_emu_bind(F f, A &&...a) {
    return {f, std::tuple<typename std::decay<A>::type...>(std::forward<A>(a)...)};
}
#define MG_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
    mg_emu_launch(#kernel, dim3(grid), dim3(block), (size_t)(shared_bytes), \
                  (cudaStream_t)(stream), \
                  mg_emu_bind([](auto... mg_emu_a) { kernel(mg_emu_a...); }, __VA_ARGS__))
/* Dynamic shared memory (`extern __shared__ T name[];` on nvcc) is written
   MG_EMU_EXTERN_SHARED(T, name) in emulated code: the launch's shared_bytes, bounds-checked. */
void *mg_emu_dynamic_shared(void);
#define MG_EMU_EXTERN_SHARED(T, name) T *name = (T *)mg_emu_dynamic_shared()

/* Bug-finder reports. By default each report is printed to stderr ("mg-emu: …", naming kernel,
   block, thread and address) and the program exits with status 1 after the launch that made
   it (at once for a host-side report). mg_emu_collect(1) keeps going and keeps the text, for
   the emulator's own tests; MG_EMU_CONTINUE=1 in the environment does the same.            */
void mg_emu_collect(int on);
const char *mg_emu_reports(void);   /* every report since the last clear, one per line */
int mg_emu_report_count(void);
void mg_emu_clear_reports(void);
/* Thread order inside a block between two barriers: 0 in order (x fastest), else a seed for a
   shuffled order (also MG_EMU_SHUFFLE=seed in the environment).                            */
void mg_emu_set_shuffle(unsigned seed);
/* Host synchronisations so far (cudaDeviceSynchronize, cudaStreamSynchronize,
   cudaEventSynchronize, cudaMemcpy, cudaMemcpyAsync to the host): a program counts the ones
   a stretch of its code makes (tests/gpu/gpu_model.c: per training step).                 */
long mg_emu_host_syncs(void);

/* The shared-memory bank model (cuda_emu.cpp, 4a): on with MG_EMU_BANKS=1 in the environment
   (a table per kernel and conflicting site at exit) or mg_emu_banks(1). mg_emu_bank_counts
   gives a kernel's totals so far (its name without template arguments): 0 if never counted.
   mg_emu_banks_pause(1) … (0) leaves accesses out (mma.h's WMMA fragments).               */
void mg_emu_banks(int on);
void mg_emu_banks_pause(int pause);
int mg_emu_bank_counts(const char *kernel, long *requests, long *wavefronts, long *ideal);
/* Its global-memory twin (MG_EMU_SECTORS=1 or mg_emu_sectors(1)): per warp-wide access the
   32-byte sectors touched, against the ideal, its distinct bytes / 32 rounded up. */
void mg_emu_sectors(int on);
int mg_emu_sector_counts(const char *kernel, long *requests, long *sectors, long *ideal);

/* --- device functions ------------------------------------------------------------------------ */
void __syncthreads(void);
int __syncthreads_count(int predicate);
int __syncthreads_and(int predicate);
int __syncthreads_or(int predicate);
void __syncwarp(unsigned int mask = 0xFFFFFFFFu);
/* The PTX instructions cp.async.cg.shared.global (16 bytes), cp.async.commit_group and
   cp.async.wait_group n, which mg_tensor.h issues through mg__cp_async16 / _commit / _wait:
   a copy lands in shared memory only when a wait completes its group (cuda_emu.cpp). */
void mg_emu_cp_async16(void *dst, const void *src);
void mg_emu_cp_async_commit(void);
void mg_emu_cp_async_wait(int n);
/* The PTX instruction ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16, which mg_tensor.h
   issues through mg__ldmatrix_x4: four 8×8 16-bit matrices, one register a lane each, on the
   fragment layout the PTX ISA documents (cuda_emu.cpp). */
void mg_emu_ldmatrix_x4(uint32_t r[4], const void *p, int trans);
unsigned int __activemask(void);
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

/* Warp operations: every lane named in mask must reach the same operation (a warp barrier that
   exchanges one 64-bit word per lane).                                                      */
enum { MG_EMU_SHFL, MG_EMU_SHFL_UP, MG_EMU_SHFL_DOWN, MG_EMU_SHFL_XOR, MG_EMU_BALLOT,
       MG_EMU_ANY, MG_EMU_ALL, MG_EMU_SYNCWARP };
uint64_t mg_emu_warp_op(int op, unsigned int mask, uint64_t value, int arg, int width);
template <class T> static inline T mg_emu_shfl(int op, unsigned int mask, T var, int arg, int width) {
    static_assert(sizeof(T) <= 8, "__shfl_*_sync: at most 8 bytes");
    uint64_t v = 0;
    T r;
    memcpy(&v, &var, sizeof var);
    v = mg_emu_warp_op(op, mask, v, arg, width);
    memcpy(&r, &v, sizeof r);
    return r;
}
template <class T> static inline T __shfl_sync(unsigned int mask, T var, int srcLane, int width = 32) {
    return mg_emu_shfl(MG_EMU_SHFL, mask, var, srcLane, width);
}
template <class T> static inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
    return mg_emu_shfl(MG_EMU_SHFL_UP, mask, var, (int)delta, width);
}
template <class T> static inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
    return mg_emu_shfl(MG_EMU_SHFL_DOWN, mask, var, (int)delta, width);
}
template <class T> static inline T __shfl_xor_sync(unsigned int mask, T var, int laneMask, int width = 32) {
    return mg_emu_shfl(MG_EMU_SHFL_XOR, mask, var, laneMask, width);
}
static inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
    return (unsigned int)mg_emu_warp_op(MG_EMU_BALLOT, mask, predicate != 0, 0, 32);
}
static inline int __any_sync(unsigned int mask, int predicate) {
    return (int)mg_emu_warp_op(MG_EMU_ANY, mask, predicate != 0, 0, 32);
}
static inline int __all_sync(unsigned int mask, int predicate) {
    return (int)mg_emu_warp_op(MG_EMU_ALL, mask, predicate != 0, 0, 32);
}

/* Atomics: out of line in the (uninstrumented) emulator, which checks the address's bounds and
   does not count the access as a race. Fibers never preempt, so each is trivially atomic.   */
float atomicAdd(float *address, float val);
double atomicAdd(double *address, double val);
int atomicAdd(int *address, int val);
unsigned int atomicAdd(unsigned int *address, unsigned int val);
unsigned long long atomicAdd(unsigned long long *address, unsigned long long val);
int atomicCAS(int *address, int compare, int val);
unsigned int atomicCAS(unsigned int *address, unsigned int compare, unsigned int val);
unsigned long long atomicCAS(unsigned long long *address, unsigned long long compare,
                             unsigned long long val);
int atomicExch(int *address, int val);
unsigned int atomicExch(unsigned int *address, unsigned int val);
float atomicExch(float *address, float val);
int atomicMax(int *address, int val);
unsigned int atomicMax(unsigned int *address, unsigned int val);
int atomicMin(int *address, int val);
unsigned int atomicMin(unsigned int *address, unsigned int val);

template <class T> static inline T __ldg(const T *p) { return *p; }

/* Math intrinsics: the fast-math forms are their accurate counterparts on the host (a GPU's
   __expf etc. differ in the last bits: see the README's limits).                           */
#define __expf expf      /* glibc declares these names itself: macros, not functions */
#define __logf logf
#define __sinf sinf
#define __cosf cosf
#define __powf powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }

#endif /* MG_CUDA_EMU_RUNTIME_H */
