/* cuda_fp16.h — the CUDA emulator's half precision (tests/cuda_emu; see README.md): the storage
   type and the conversions, round-to-nearest-even with subnormals, overflow to inf, as CUDA's
   __float2half. Arithmetic on the type goes through float.                                */
#ifndef MG_CUDA_EMU_FP16_H
#define MG_CUDA_EMU_FP16_H
#include "cuda_runtime.h"
uint16_t mg_emu_f32_to_f16(float f);
float mg_emu_f16_to_f32(uint16_t h);
struct __half {
    uint16_t __x;
    __half() = default;
    __half(float f) : __x(mg_emu_f32_to_f16(f)) {}
    operator float() const { return mg_emu_f16_to_f32(__x); }
};
typedef __half half;
static inline __half __float2half(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h; }
#endif /* MG_CUDA_EMU_FP16_H */
