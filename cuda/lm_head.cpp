// CPU twins of lm_head.cu: the LM head on the last row (tied embedding) and the greedy argmax.
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

// seq[pos + T] = argmax(logits) (lowest index on ties), written only if pos + T <= max_ctx; state[STATE_POS] += T
extern "C" void op_argmax(int* seq, int* state, const float* logits, int V, int T, int max_ctx) {
  OpTimer timer(OP_ARGMAX);
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  const int next = state[STATE_POS] + T;
  if (next <= max_ctx) seq[next] = best;
  state[STATE_POS] = next;
}
