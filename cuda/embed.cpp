// CPU twin of embed.cu.
#include "cpu_runtime.h"
#include "ops.h"

// out: (B·T, C) = wte[seq_b[pos_b + t]] + wpe[pos_b + t]     wte: (V, C)  wpe: (max_ctx, C)
extern "C" void op_embed(float* out, const int* seq, const int* state, const void* wte, const void* wpe, int B, int T, int C,
                         int max_ctx, int wdtype) {
  OpTimer timer(OP_EMBED);
  if (cpu_reject_unless(wdtype == DTYPE_F32)) return;
  for (int b = 0; b < B; b++) {
    const int pos = state[b * STATE_INTS + STATE_POS];
    const int* tokens = seq + (size_t)b * (max_ctx + 1);
    for (int t = 0; t < T; t++) {
      const float* token_row = static_cast<const float*>(wte) + (size_t)tokens[pos + t] * C;
      const float* position_row = static_cast<const float*>(wpe) + (size_t)(pos + t) * C;
      float* out_row = out + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) out_row[c] = token_row[c] + position_row[c];
    }
  }
}
