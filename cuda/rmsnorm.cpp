// CPU twin of rmsnorm.cu.
#include <math.h>

#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr long kRowFloatsPerChunk = 1 << 14;  // rows of 64 KB per chunk

// y: (C) = x / sqrt(mean(x^2) + eps) * weight
void rms_normalize_row(float* y, const float* x, const float* weight, int C, float eps) {
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < C; c++) squares += x[c] * x[c];
  const float rms_inv = 1.0f / sqrtf(squares / C + eps);
#pragma omp simd
  for (int c = 0; c < C; c++) y[c] = x[c] * rms_inv * weight[c];
}
}  // namespace

// out: (rows, C) = inp / sqrt(mean(inp^2) + eps) * weight     inp: (rows, C)  weight: (C)
extern "C" void op_rmsnorm(float* out, const float* inp, const float* weight, int rows, int C, float eps) {
  OpTimer timer(OP_RMSNORM);
  if (cpu_reject_unless(rows >= 1 && C >= 1)) return;
  const long rows_per_chunk = C >= kRowFloatsPerChunk ? 1 : kRowFloatsPerChunk / C;
  parallel_range(rows, rows_per_chunk, (long)rows * C, [&](long r0, long r1) {
    for (long r = r0; r < r1; r++) rms_normalize_row(out + r * C, inp + r * C, weight, C, eps);
  });
}
