// CPU twins of elementwise.cu: GELU and the residual add.
#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr long kElementsPerChunk = 1 << 14;  // 64 KB of floats

// out[begin:end] = gelu_new(inp[begin:end])
void gelu_range(float* out, const float* inp, long begin, long end) {
#pragma omp simd
  for (long i = begin; i < end; i++) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + exp_approx(-2.0f * u));
  }
}

// out[begin:end] = a[begin:end] + b[begin:end]
void add_range(float* out, const float* a, const float* b, long begin, long end) {
#pragma omp simd
  for (long i = begin; i < end; i++) out[i] = a[i] + b[i];
}
}  // namespace

// out: (N) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
extern "C" void op_gelu(float* out, const float* inp, int N) {
  OpTimer timer(OP_GELU);
  parallel_range(N, kElementsPerChunk, N, [=](long begin, long end) { gelu_range(out, inp, begin, end); });
}

// out: (N) = a + b
extern "C" void op_residual(float* out, const float* a, const float* b, int N) {
  OpTimer timer(OP_RESIDUAL);
  parallel_range(N, kElementsPerChunk, N, [=](long begin, long end) { add_range(out, a, b, begin, end); });
}
