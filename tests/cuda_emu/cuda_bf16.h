/* cuda_bf16.h — the CUDA emulator's bfloat16 (tests/cuda_emu; see README.md): the storage type
   and the conversions, round-to-nearest-even as CUDA's __float2bfloat16 (NaN stays NaN).
   Arithmetic on the type goes through float, as the host side of CUDA's header does.     */
#ifndef MG_CUDA_EMU_BF16_H
#define MG_CUDA_EMU_BF16_H
#include "cuda_runtime.h"
uint16_t mg_emu_f32_to_bf16(float f);
float mg_emu_bf16_to_f32(uint16_t h);
struct __nv_bfloat16 {
    uint16_t __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(mg_emu_f32_to_bf16(f)) {}
    operator float() const { return mg_emu_bf16_to_f32(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
#endif /* MG_CUDA_EMU_BF16_H */
