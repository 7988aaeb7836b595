// op_layernorm: per-row normalisation, two-pass (mean, then variance of the deviations) for accuracy.
#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kLayernormThreads = 256;

// out: (T, C) = (inp - mean) / sqrt(var + eps) * weight + bias     inp: (T, C)  weight, bias: (C)
// grid: (T)  block: (kLayernormThreads), one block per row; the row (<= 6.4 KB) is re-read from L1/L2.
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ weight,
                     const float* __restrict__ bias, int C, float eps) {
  __shared__ float partial[kWarpSize];
  const float* x = inp + (size_t)blockIdx.x * C;
  float* y = out + (size_t)blockIdx.x * C;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) sum += x[i];
  const float mean = block_sum(sum, partial) / C;

  float squares = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = x[i] - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(squares, partial) / C + eps);

  for (int i = threadIdx.x; i < C; i += blockDim.x) y[i] = (x[i] - mean) * rstd * __ldg(weight + i) + __ldg(bias + i);
}

extern "C" void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int T, int C, float eps) {
  LAUNCH(layernorm_kernel, T, kLayernormThreads, out, inp, weight, bias, C, eps);
}
