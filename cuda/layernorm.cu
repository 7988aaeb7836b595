// op_layernorm: per-row normalisation, two-pass (mean, then variance of the deviations) for accuracy, over
// the row held in registers: the row, its weight and its bias are each read once.
#include "cols.h"
#include "dispatch.h"
#include "ops.h"
#include "warp.h"

constexpr int kLayernormThreads = 256;
constexpr int kLayernormUnits = 4;  // column groups (kWidth floats) per thread: C <= 4096 (float4) or 1024 (float)

// out: (T, C) = (inp - mean) / sqrt(var + eps) * weight + bias     inp: (T, C)  weight, bias: (C)
// grid: (T)  block: (kLayernormThreads), one block per row; thread t holds column groups t + 256 k, k < 4,
// loaded (weight and bias first, before the wait for the predecessor that writes inp) before any is used.
template <int kWidth>
__global__ void __launch_bounds__(kLayernormThreads)
    layernorm_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ weight,
                     const float* __restrict__ bias, int C, float eps, Overlap overlap) {
  __shared__ float partial[kWarpSize];
  let_successor_start();
  const int groups = C / kWidth;
  Cols<kWidth> x[kLayernormUnits], w[kLayernormUnits], b[kLayernormUnits];
#pragma unroll
  for (int k = 0; k < kLayernormUnits; k++) {
    const int g = threadIdx.x + k * kLayernormThreads;
    w[k] = g < groups ? load_cols<kWidth>(weight + g * kWidth) : Cols<kWidth>{};
    b[k] = g < groups ? load_cols<kWidth>(bias + g * kWidth) : Cols<kWidth>{};
  }
  wait_for_predecessor(overlap);
  const float* row = inp + (size_t)blockIdx.x * C;
#pragma unroll
  for (int k = 0; k < kLayernormUnits; k++) {
    const int g = threadIdx.x + k * kLayernormThreads;
    x[k] = g < groups ? load_cols<kWidth>(row + g * kWidth) : Cols<kWidth>{};
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kLayernormUnits; k++)
#pragma unroll
    for (int j = 0; j < kWidth; j++) sum += x[k].v[j];
  const float mean = block_sum(sum, partial) / C;
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kLayernormUnits; k++)
#pragma unroll
    for (int j = 0; j < kWidth; j++) {
      const float d = (int)threadIdx.x + k * kLayernormThreads < groups ? x[k].v[j] - mean : 0.0f;
      squares += d * d;
    }
  const float rstd = 1.0f / sqrtf(block_sum(squares, partial) / C + eps);
  float* y = out + (size_t)blockIdx.x * C;
#pragma unroll
  for (int k = 0; k < kLayernormUnits; k++) {
    const int g = threadIdx.x + k * kLayernormThreads;
    if (g >= groups) continue;
    Cols<kWidth> o;
#pragma unroll
    for (int j = 0; j < kWidth; j++) o.v[j] = (x[k].v[j] - mean) * rstd * w[k].v[j] + b[k].v[j];
    store_cols<kWidth>(y + g * kWidth, o);
  }
}

extern "C" void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int T, int C,
                             float eps) {
  const bool vec = row_vec4_count(C, out, inp, weight, bias) > 0;
  if (C > kLayernormThreads * kLayernormUnits * (vec ? kVecWidth : 1)) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  const auto kernel = vec ? layernorm_kernel<kVecWidth> : layernorm_kernel<1>;
  launch_op(kernel, {.grid = T, .block = kLayernormThreads}, out, inp, weight, bias, C, eps);
}
