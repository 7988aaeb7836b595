// CPU twins of elementwise.cu: GELU, the residual add and SwiGLU.
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
// out (I) = silu(gate) * up = gate / (1 + e^-gate) * up
void swiglu_row(float* out, const float* gate, const float* up, int I) {
#pragma omp simd
  for (int i = 0; i < I; i++) out[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
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

// out: (rows, I) = silu(gate) * up     gate_up: (rows, 2I) as [gate | up]
extern "C" void op_swiglu(float* out, const float* gate_up, int rows, int I) {
  OpTimer timer(OP_SWIGLU);
  if (cpu_reject_unless(rows >= 1 && I >= 1)) return;
  const long rows_per_chunk = I >= kElementsPerChunk ? 1 : kElementsPerChunk / I;
  parallel_range(rows, rows_per_chunk, (long)rows * I, [=](long r0, long r1) {
    for (long r = r0; r < r1; r++) swiglu_row(out + r * I, gate_up + r * 2 * I, gate_up + r * 2 * I + I, I);
  });
}
