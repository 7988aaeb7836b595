// CPU twin of layernorm.cu.
#include <math.h>

#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr long kRowFloatsPerChunk = 1 << 14;  // rows of 64 KB per chunk

// y: (C) = (x - mean) / sqrt(var + eps) * weight + bias
void normalize_row(float* y, const float* x, const float* weight, const float* bias, int C, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const float mean = sum / C;
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < C; c++) squares += (x[c] - mean) * (x[c] - mean);
  const float rstd = 1.0f / sqrtf(squares / C + eps);
#pragma omp simd
  for (int c = 0; c < C; c++) y[c] = (x[c] - mean) * rstd * weight[c] + bias[c];
}
}  // namespace

// out: (T, C) = (inp - mean) / sqrt(var + eps) * weight + bias     inp: (T, C)  weight, bias: (C)
extern "C" void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int T, int C,
                             float eps) {
  OpTimer timer(OP_LAYERNORM);
  const long rows_per_chunk = C >= kRowFloatsPerChunk ? 1 : kRowFloatsPerChunk / C;
  parallel_range(T, rows_per_chunk, (long)T * C, [&](long t0, long t1) {
    for (long t = t0; t < t1; t++) normalize_row(out + t * C, inp + t * C, weight, bias, C, eps);
  });
}
