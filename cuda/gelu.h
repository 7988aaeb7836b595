// GPT-2's gelu_new on the device: used by op_gelu (elementwise.cu) and the fused op_ln_linear_gelu (linear.cu).
#pragma once
#include <math.h>

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}
