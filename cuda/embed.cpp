// CPU twin of embed.cu.
#include "cpu_runtime.h"
#include "ops.h"

// out: (T, C) = wte[seq[pos + t]] + wpe[pos + t]     wte: (V, C)  wpe: (max_ctx, C)
extern "C" void op_embed(float* out, const int* seq, const int* state, const float* wte, const float* wpe, int T, int C) {
  OpTimer timer(OP_EMBED);
  const int pos = state[STATE_POS];
  for (int t = 0; t < T; t++) {
    const float* token_row = wte + (size_t)seq[pos + t] * C;
    const float* position_row = wpe + (size_t)(pos + t) * C;
    float* out_row = out + (size_t)t * C;
#pragma omp simd
    for (int c = 0; c < C; c++) out_row[c] = token_row[c] + position_row[c];
  }
}
