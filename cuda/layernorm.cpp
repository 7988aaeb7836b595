// CPU twin of layernorm.cu.
#include <math.h>

#include "cpu_runtime.h"
#include "ops.h"

// out: (T, C) = (inp - mean) / sqrt(var + eps) * weight + bias     inp: (T, C)  weight, bias: (C)
extern "C" void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int T, int C, float eps) {
  OpTimer timer(OP_LAYERNORM);
#pragma omp parallel for if ((long)T * C >= kParallelMinWork)
  for (int t = 0; t < T; t++) {
    const float* x = inp + (size_t)t * C;
    float* y = out + (size_t)t * C;
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
}
