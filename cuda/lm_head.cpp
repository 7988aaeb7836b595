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

// logits: (V) = inp[T - 1] (C) @ wte (V, C)^T
extern "C" void op_lm_head(float* logits, const float* inp, const float* wte, int T, int C, int V) {
  OpTimer timer(OP_LM_HEAD);
  const float* x = inp + (size_t)(T - 1) * C;
  parallel_range(V, kVocabRowsPerChunk, (long)V * C, [=](long v0, long v1) { score_vocab_rows(logits, x, wte, v0, v1, C); });
}

// seq[pos + T] = argmax(logits), written only if pos + T <= max_ctx; state[STATE_POS] += T (ops.h: lowest index
// on ties, NaN never chosen, 0 when every logit is NaN)
extern "C" void op_argmax(int* seq, int* state, float*, const float* logits, int V, int T, int max_ctx) {
  OpTimer timer(OP_ARGMAX);
  int best = -1;  // no non-NaN logit yet
  for (int v = 0; v < V; v++)
    if (best < 0 ? logits[v] >= -INFINITY : logits[v] > logits[best]) best = v;
  const int next = state[STATE_POS] + T;
  if (next <= max_ctx) seq[next] = best < 0 ? 0 : best;
  state[STATE_POS] = next;
}

// Partial results are a GPU matter: the CPU ops merge nothing across blocks.
extern "C" size_t op_partials_bytes(int, int, int) { return 0; }

// logits: (V) = layernorm(x) @ wte^T, then the next token: op_layernorm, op_lm_head, op_argmax (T = 1)
extern "C" void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                                     const float* ln_bias, const float* wte, int C, int V, int max_ctx, float eps) {
  OpTimer timer(OP_LN_LM_HEAD_ARGMAX);
  static thread_local std::vector<float> normed;
  normed.resize(C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, 1, C, eps);
  op_lm_head(logits, normed.data(), wte, 1, C, V);
  op_argmax(seq, state, partials, logits, V, 1, max_ctx);
}
