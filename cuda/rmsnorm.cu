// op_rmsnorm: per-row RMS normalisation over the row held in registers: the row and its weight are each read once.
#include "cols.h"
#include "dispatch.h"
#include "ops.h"
#include "warp.h"

constexpr int kRmsnormThreads = 256;
constexpr int kRmsnormUnits = 4;  // column groups (kWidth floats) per thread: C <= 4096 (float4) or 1024 (float)

// out: (rows, C) = inp / sqrt(mean(inp^2) + eps) * weight     inp: (rows, C)  weight: (C)
// grid: (rows)  block: (kRmsnormThreads), one block per row; thread t holds column groups t + 256 k, k < 4, loaded
// (the weight first, before the wait for the predecessor that writes inp) before any is used.
template <int kWidth>
__global__ void __launch_bounds__(kRmsnormThreads)
    rmsnorm_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ weight, int C,
                   float eps, Overlap overlap) {
  __shared__ float partial[kWarpSize];
  let_successor_start();
  const int groups = C / kWidth;
  Cols<kWidth> x[kRmsnormUnits], w[kRmsnormUnits];
#pragma unroll
  for (int k = 0; k < kRmsnormUnits; k++) {
    const int g = threadIdx.x + k * kRmsnormThreads;
    w[k] = g < groups ? load_cols<kWidth>(weight + g * kWidth) : Cols<kWidth>{};
  }
  wait_for_predecessor(overlap);
  const float* row = inp + (size_t)blockIdx.x * C;
#pragma unroll
  for (int k = 0; k < kRmsnormUnits; k++) {
    const int g = threadIdx.x + k * kRmsnormThreads;
    x[k] = g < groups ? load_cols<kWidth>(row + g * kWidth) : Cols<kWidth>{};
  }
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsnormUnits; k++)
#pragma unroll
    for (int j = 0; j < kWidth; j++) squares += x[k].v[j] * x[k].v[j];
  const float rms_inv = 1.0f / sqrtf(block_sum(squares, partial) / C + eps);
  float* y = out + (size_t)blockIdx.x * C;
#pragma unroll
  for (int k = 0; k < kRmsnormUnits; k++) {
    const int g = threadIdx.x + k * kRmsnormThreads;
    if (g >= groups) continue;
    Cols<kWidth> o;
#pragma unroll
    for (int j = 0; j < kWidth; j++) o.v[j] = x[k].v[j] * rms_inv * w[k].v[j];
    store_cols<kWidth>(y + g * kWidth, o);
  }
}

extern "C" void op_rmsnorm(float* out, const float* inp, const float* weight, int rows, int C, float eps) {
  const bool vec = row_vec4_count(C, out, inp, weight) > 0;
  if (rt_reject_unless(rows >= 1 && C >= 1 && C <= kRmsnormThreads * kRmsnormUnits * (vec ? kVecWidth : 1))) return;
  const auto kernel = vec ? rmsnorm_kernel<kVecWidth> : rmsnorm_kernel<1>;
  launch_op(kernel, {.grid = rows, .block = kRmsnormThreads}, out, inp, weight, C, eps);
}
