// CPU twins of lm_head.cu: the LM head on the last row (tied embedding) and the greedy argmax.
#include <math.h>

#include <vector>

#include "cpu_runtime.h"
#include "ops.h"

namespace {
constexpr long kVocabRowsPerChunk = 128;  // 384 KB of wte per chunk at C = 768

// logits[v0:v1] = x (C) @ wte[v0:v1]^T
void score_vocab_rows(float* logits, const float* x, const float* wte, long v0, long v1, int C) {
  for (long v = v0; v < v1; v++) {
    const float* row = wte + v * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++) dot += x[c] * row[c];
    logits[v] = dot;
  }
}
}  // namespace

// logits: (B, V) = each sequence's last row inp[b·T + T - 1] (C) @ wte (V, C)^T
extern "C" void op_lm_head(float* logits, const float* inp, const void* wte, int B, int T, int C, int V, int wdtype) {
  OpTimer timer(OP_LM_HEAD);
  if (cpu_reject_unless(wdtype == DTYPE_F32)) return;
  const float* table = static_cast<const float*>(wte);
  for (int b = 0; b < B; b++) {
    const float* x = inp + ((size_t)b * T + T - 1) * C;
    float* row_logits = logits + (size_t)b * V;
    parallel_range(V, kVocabRowsPerChunk, (long)V * C, [=](long v0, long v1) { score_vocab_rows(row_logits, x, table, v0, v1, C); });
  }
}

// For each sequence b: seq_b[pos_b + T] = argmax(logits_b), written only if pos_b + T <= max_ctx; state_b[STATE_POS] += T
// (ops.h: lowest index on ties, NaN never chosen, 0 when every logit is NaN)
extern "C" void op_argmax(int* seq, int* state, float*, const float* logits, int B, int V, int T, int max_ctx) {
  OpTimer timer(OP_ARGMAX);
  for (int b = 0; b < B; b++) {
    const float* row = logits + (size_t)b * V;
    int best = -1;  // no non-NaN logit yet
    for (int v = 0; v < V; v++)
      if (best < 0 ? row[v] >= -INFINITY : row[v] > row[best]) best = v;
    int* pos = state + b * STATE_INTS + STATE_POS;
    const int next = *pos + T;
    if (next <= max_ctx) seq[(size_t)b * (max_ctx + 1) + next] = best < 0 ? 0 : best;
    *pos = next;
  }
}

// Partial results are a GPU matter: the CPU ops merge nothing across blocks.
extern "C" size_t op_partials_bytes(int, int, int, int) { return 0; }

// logits: (B, V) = layernorm(x) @ wte^T, then each sequence's next token: op_layernorm, op_lm_head, op_argmax (T = 1)
extern "C" void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                                     const float* ln_bias, const void* wte, int B, int C, int V, int max_ctx, float eps, int wdtype) {
  OpTimer timer(OP_LN_LM_HEAD_ARGMAX);
  static thread_local std::vector<float> normed;
  normed.resize((size_t)B * C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, B, C, eps);
  op_lm_head(logits, normed.data(), wte, B, 1, C, V, wdtype);
  op_argmax(seq, state, partials, logits, B, V, 1, max_ctx);
}
