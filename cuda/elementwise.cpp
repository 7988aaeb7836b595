// CPU twins of elementwise.cu: GELU and the residual add.
#include <math.h>
#include <stdint.h>

#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 split so r = x - n ln2 stays exact
constexpr float kExpClamp = 88.0f;                                 // e^88 is near FLT_MAX; gelu saturates long before

// e^x for |x| <= 88 without a libm call (glibc's tanhf cost ~17 ns an element here): 2^n · p(r), r in [-ln2/2, ln2/2],
// p the degree-6 Taylor/Cephes polynomial; relative error ~1e-7.
inline float exp_approx(float x) {
  x = fminf(fmaxf(x, -kExpClamp), kExpClamp);
  const float n = nearbyintf(x * kLog2e);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(float, ((int32_t)n + 127) << 23);
}
}  // namespace

// out: (N) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
extern "C" void op_gelu(float* out, const float* inp, int N) {
  OpTimer timer(OP_GELU);
#pragma omp parallel for simd if (N >= kParallelMinWork)
  for (int i = 0; i < N; i++) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + exp_approx(-2.0f * u));
  }
}

// out: (N) = a + b
extern "C" void op_residual(float* out, const float* a, const float* b, int N) {
  OpTimer timer(OP_RESIDUAL);
#pragma omp parallel for simd if (N >= kParallelMinWork)
  for (int i = 0; i < N; i++) out[i] = a[i] + b[i];
}
