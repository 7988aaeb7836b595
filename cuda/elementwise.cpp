// CPU twins of elementwise.cu: GELU, the residual add and SwiGLU.
#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr long kElementsPerChunk = 1 << 14;  // 64 KB of floats

// gelu_new of a float or of each lane of a vecf: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u))
template <typename V> V gelu(V x) {
  const V u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return x / (1.0f + exp_approx(-2.0f * u));
}

// out[begin:end] = gelu_new(inp[begin:end]), a vector at a time (exp_approx's loops must be)
void gelu_range(float* out, const float* inp, long begin, long end) {
  long i = begin;
  for (; i + kVecFloats <= end; i += kVecFloats) store_vec(out + i, gelu(load_vec(inp + i)));
  for (; i < end; i++) out[i] = gelu(inp[i]);
}

// out[begin:end] = a[begin:end] + b[begin:end]
void add_range(float* out, const float* a, const float* b, long begin, long end) {
#pragma omp simd
  for (long i = begin; i < end; i++) out[i] = a[i] + b[i];
}

// silu(gate) · up = gate / (1 + e^-gate) · up, of floats or of each lane of vecfs
template <typename V> V swiglu(V gate, V up) { return gate / (1.0f + exp_approx(-gate)) * up; }

// out (I) = silu(gate) * up, a vector at a time
void swiglu_row(float* out, const float* gate, const float* up, int I) {
  int i = 0;
  for (; i + kVecFloats <= I; i += kVecFloats) store_vec(out + i, swiglu(load_vec(gate + i), load_vec(up + i)));
  for (; i < I; i++) out[i] = swiglu(gate[i], up[i]);
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
