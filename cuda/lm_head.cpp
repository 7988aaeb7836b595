// CPU twins of lm_head.cu: the LM head on the last row (tied embedding) and the greedy argmax.
#include <math.h>

#include <vector>

#include "cpu_runtime.h"
#include "ops.h"

// logits: (V) = inp[T - 1] (C) @ wte (V, C)^T
extern "C" void op_lm_head(float* logits, const float* inp, const float* wte, int T, int C, int V) {
  OpTimer timer(OP_LM_HEAD);
  const float* x = inp + (size_t)(T - 1) * C;
#pragma omp parallel for schedule(static) if ((long)V * C >= kParallelMinWork)
  for (int v = 0; v < V; v++) {
    const float* row = wte + (size_t)v * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++) dot += x[c] * row[c];
    logits[v] = dot;
  }
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
