// CPU twins of attention.cu: append to the KV cache, then causal attention over it (no stored mask).
#include <math.h>
#include <string.h>

#include <vector>

#include "cpu_runtime.h"
#include "ops.h"

// k_cache, v_cache: (max_ctx, C) rows [pos, pos + T) = the k and v parts of qkv: (T, 3C)
extern "C" void op_kv_append(float* k_cache, float* v_cache, const float* qkv, const int* state, int T, int C, int max_ctx) {
  OpTimer timer(OP_KV_APPEND);
  const int pos = state[STATE_POS];
  for (int t = 0; t < T && pos + t < max_ctx; t++) {
    const float* row = qkv + (size_t)t * 3 * C;
    memcpy(k_cache + (size_t)(pos + t) * C, row + C, sizeof(float) * C);
    memcpy(v_cache + (size_t)(pos + t) * C, row + 2 * C, sizeof(float) * C);
  }
}

extern "C" size_t op_attention_scratch_bytes(int, int, int, int) { return 0; }

namespace {

// out_head: (hs) = softmax(q · K[0..keys)^T / sqrt(hs)) @ V[0..keys)     scores: (keys) scratch
void attend_one_head(float* out_head, float* scores, const float* q, const float* k_head, const float* v_head, int keys, int C, int hs) {
  const float scale = 1.0f / sqrtf((float)hs);
  float max_score = -INFINITY;
  for (int j = 0; j < keys; j++) {
    const float* k = k_head + (size_t)j * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < hs; d++) dot += q[d] * k[d];
    scores[j] = dot * scale;
    if (scores[j] > max_score) max_score = scores[j];
  }
  float total = 0.0f;
  for (int j = 0; j < keys; j++) {
    scores[j] = expf(scores[j] - max_score);
    total += scores[j];
  }
  for (int d = 0; d < hs; d++) out_head[d] = 0.0f;
  for (int j = 0; j < keys; j++) {
    const float p = scores[j] / total;
    const float* v = v_head + (size_t)j * C;
#pragma omp simd
    for (int d = 0; d < hs; d++) out_head[d] += p * v[d];
  }
}

}  // namespace

// out: (T, C); query t (absolute position pos + t) attends to cache rows [0, pos + t]
extern "C" void op_attention(float* out, float*, const float* qkv, const float* k_cache, const float* v_cache,
                             const int* state, int T, int C, int n_head, int max_ctx) {
  OpTimer timer(OP_ATTENTION);
  const int pos = state[STATE_POS];
  const int hs = C / n_head;
#pragma omp parallel if ((long)T * n_head * (pos + T) * (C / n_head) >= kParallelMinWork)
  {
    std::vector<float> scores(max_ctx);
#pragma omp for collapse(2) schedule(static)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < n_head; h++) {
#ifdef PLANT_BUG_MASK
        const int visible = pos + t + 2;  // planted for test/model-cpu.test.ts: one future key leaks through
#else
        const int visible = pos + t + 1;
#endif
        const int keys = visible < max_ctx ? visible : max_ctx;
        attend_one_head(out + (size_t)t * C + h * hs, scores.data(), qkv + (size_t)t * 3 * C + h * hs,
                        k_cache + h * hs, v_cache + h * hs, keys, C, hs);
      }
  }
}
