// CPU twin of linear.cu: out (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC), weight in Conv1D layout.
//
// Few rows (decode): each thread streams a contiguous band of weight rows into its own partial
// output, then the partials are summed — every weight byte is read once, sequentially.
// Many rows (prefill, uncached): tiles of rows × columns, the weight tile reused across the rows.
#include <string.h>

#include <algorithm>
#include <vector>

#include <omp.h>

#include "cpu_runtime.h"
#include "ops.h"

namespace {

constexpr int kFewRows = 8;       // up to this many rows, split the reduction over C
constexpr int kRowTile = 8;       // rows per tile in the many-rows path
constexpr int kColumnTile = 256;  // output columns per tile in the many-rows path
constexpr int kRowsPerPass = 8;   // weight rows folded into the partial per pass (few-rows path)

// partial: (T, OC) = inp[:, c0:c1] @ weight[c0:c1, :]
// Four weight rows per pass over the partial row: one load and one store of it per four FMAs.
void accumulate_band(float* partial, const float* inp, const float* weight, int T, int C, int OC, int c0, int c1) {
  memset(partial, 0, sizeof(float) * (size_t)T * OC);
  int c = c0;
  for (; c + kRowsPerPass <= c1; c += kRowsPerPass) {
    const float* w0 = weight + (size_t)c * OC;
    const float *w1 = w0 + OC, *w2 = w1 + OC, *w3 = w2 + OC, *w4 = w3 + OC, *w5 = w4 + OC, *w6 = w5 + OC, *w7 = w6 + OC;
    for (int t = 0; t < T; t++) {
      const float* x = inp + (size_t)t * C + c;
      const float x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
      float* p = partial + (size_t)t * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++)
        p[o] += (x0 * w0[o] + x1 * w1[o] + x2 * w2[o] + x3 * w3[o]) + (x4 * w4[o] + x5 * w5[o] + x6 * w6[o] + x7 * w7[o]);
    }
  }
  for (; c < c1; c++) {
    const float* w_row = weight + (size_t)c * OC;
    for (int t = 0; t < T; t++) {
      const float x = inp[(size_t)t * C + c];
      float* p = partial + (size_t)t * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++) p[o] += x * w_row[o];
    }
  }
}

void linear_few_rows(float* out, const float* inp, const float* weight, const float* bias, int T, int C, int OC) {
  const int threads = (long)T * C * OC >= kParallelMinWork ? std::min(omp_get_max_threads(), C) : 1;
  static thread_local std::vector<float> partials;  // (threads, T, OC), reused across calls
  const size_t per_thread = (size_t)T * OC;
  partials.resize(per_thread * threads);
  float* all = partials.data();
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), n = omp_get_num_threads();
    const int c0 = (int)((long)C * id / n), c1 = (int)((long)C * (id + 1) / n);
    accumulate_band(all + per_thread * id, inp, weight, T, C, OC, c0, c1);
#pragma omp barrier
#pragma omp for
    for (int i = 0; i < T * OC; i++) {
      float sum = bias[i % OC];
      for (int k = 0; k < n; k++) sum += all[per_thread * k + i];
      out[i] = sum;
    }
  }
}

// out[t0:t1, o0:o1] for one tile
void linear_tile(float* out, const float* inp, const float* weight, const float* bias, int C, int OC, int t0, int t1, int o0, int o1) {
  float acc[kRowTile][kColumnTile];
  const int width = o1 - o0;
  for (int t = t0; t < t1; t++)
    for (int o = 0; o < width; o++) acc[t - t0][o] = bias[o0 + o];
  for (int c = 0; c < C; c++) {
    const float* w = weight + (size_t)c * OC + o0;
    for (int t = t0; t < t1; t++) {
      const float x = inp[(size_t)t * C + c];
      float* a = acc[t - t0];
#pragma omp simd
      for (int o = 0; o < width; o++) a[o] += x * w[o];
    }
  }
  for (int t = t0; t < t1; t++) memcpy(out + (size_t)t * OC + o0, acc[t - t0], sizeof(float) * width);
}

void linear_many_rows(float* out, const float* inp, const float* weight, const float* bias, int T, int C, int OC) {
  const int row_tiles = (T + kRowTile - 1) / kRowTile;
  const int column_tiles = (OC + kColumnTile - 1) / kColumnTile;
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * C * OC >= kParallelMinWork)
  for (int rt = 0; rt < row_tiles; rt++)
    for (int ct = 0; ct < column_tiles; ct++) {
      const int t0 = rt * kRowTile, o0 = ct * kColumnTile;
      linear_tile(out, inp, weight, bias, C, OC, t0, std::min(T, t0 + kRowTile), o0, std::min(OC, o0 + kColumnTile));
    }
}

}  // namespace

// out: (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC)
extern "C" void op_linear(float* out, float*, const float* inp, const float* weight, const float* bias, int T, int C, int OC) {
  OpTimer timer(OP_LINEAR);
  if (T <= kFewRows)
    linear_few_rows(out, inp, weight, bias, T, C, OC);
  else
    linear_many_rows(out, inp, weight, bias, T, C, OC);
}

// ---- fused decode ops: the unfused twins in sequence (one row; the intermediate row in a reused buffer) ----------
extern "C" void op_ln_qkv(float* qkv, float* k_cache, float* v_cache, float* partials, const float* x, const float* ln_weight,
                          const float* ln_bias, const float* weight, const float* bias, const int* state, int C, int max_ctx,
                          float eps) {
  OpTimer timer(OP_LN_QKV);
  static thread_local std::vector<float> normed;
  normed.resize(C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, 1, C, eps);
  op_linear(qkv, partials, normed.data(), weight, bias, 1, C, 3 * C);
  op_kv_append(k_cache, v_cache, qkv, state, 1, C, max_ctx);
}

extern "C" void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight, const float* ln_bias,
                                  const float* weight, const float* bias, int C, int OC, float eps) {
  OpTimer timer(OP_LN_LINEAR_GELU);
  static thread_local std::vector<float> normed;
  normed.resize(C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, 1, C, eps);
  op_linear(out, partials, normed.data(), weight, bias, 1, C, OC);
  op_gelu(out, out, OC);
}

extern "C" void op_linear_residual(float* x, float* partials, const float* inp, const float* weight, const float* bias, int C, int OC) {
  OpTimer timer(OP_LINEAR_RESIDUAL);
  static thread_local std::vector<float> product;
  product.resize(OC);
  op_linear(product.data(), partials, inp, weight, bias, 1, C, OC);
  op_residual(x, x, product.data(), OC);
}
