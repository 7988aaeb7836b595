// CPU twin of rope.cu.
#include <math.h>

#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr int kMaxHeadSize = 256;

// x: (hs) in place: RMS-normalised and scaled by norm (when given), then turned by the position's cos and sin
void turn_head(float* x, const float* cos_sin, const float* norm, int hs, float eps) {
  const int half = hs / 2;
  float v[kMaxHeadSize];
  float scale = 1.0f;
  if (norm) {
    float squares = 0.0f;
    for (int e = 0; e < hs; e++) squares += x[e] * x[e];
    scale = 1.0f / sqrtf(squares / hs + eps);
  }
  for (int e = 0; e < hs; e++) v[e] = norm ? x[e] * scale * norm[e] : x[e];
  const float* cs = cos_sin;
  const float* sn = cos_sin + half;
  for (int i = 0; i < half; i++) {
    x[i] = v[i] * cs[i] - v[i + half] * sn[i];
    x[i + half] = v[i + half] * cs[i] + v[i] * sn[i];
  }
}
}  // namespace

// qkv: (B·T, C + 2 kv_C), each row's n_head q heads and n_kv_head k heads turned in place at position pos_b + t
extern "C" void op_rope(float* qkv, const int* state, const float* rope, const float* q_norm, const float* k_norm,
                        int B, int T, int C, int n_head, int n_kv_head, int max_ctx, float eps) {
  OpTimer timer(OP_ROPE);
  const bool shape_fits = n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && C % n_head == 0 &&
                          C / n_head % 2 == 0 && C / n_head <= kMaxHeadSize;
  if (cpu_reject_unless(shape_fits && (q_norm == nullptr) == (k_norm == nullptr))) return;
  const int hs = C / n_head, heads = n_head + n_kv_head;
  const size_t row_floats = (size_t)C + 2 * (size_t)n_kv_head * hs;
  parallel_range((long)B * T, 1, (long)B * T * heads * hs, [&](long r0, long r1) {
    for (long r = r0; r < r1; r++) {
      const int pos = state[(r / T) * STATE_INTS + STATE_POS] + (int)(r % T);
      if (pos >= max_ctx) continue;
      for (int h = 0; h < heads; h++)
        turn_head(qkv + r * row_floats + (size_t)h * hs, rope + (size_t)pos * hs, h < n_head ? q_norm : k_norm, hs,
                  eps);
    }
  });
}
