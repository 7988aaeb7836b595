// CPU twin of embed.cu.
#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {
// out: (C) = token_row + position_row, both widened from their storage type; token_row alone without a position row
template <typename S> void add_rows(float* out, const S* token_row, const S* position_row, int C) {
  if (position_row == nullptr) return widen_into(out, token_row, C);
  int c = 0;
  for (; c + kVecFloats <= C; c += kVecFloats)
    store_vec(out + c, load_widened(token_row + c) + load_widened(position_row + c));
  for (; c < C; c++) out[c] = widen(token_row[c]) + widen(position_row[c]);
}
}  // namespace

// out: (B·T, C) = wte[seq_b[pos_b + t]] + wpe[pos_b + t]     wte: (V, C)  wpe: (max_ctx, C) or null, in wdtype
extern "C" void op_embed(float* out, const int* seq, const int* state, const void* wte, const void* wpe, int B, int T,
                         int C, int max_ctx, int wdtype) {
  OpTimer timer(OP_EMBED);
  if (cpu_reject_unless(is_storage_type(wdtype))) return;
  with_storage(wdtype, [&](auto storage) {
    using S = typename decltype(storage)::type;
    for (int b = 0; b < B; b++) {
      const int pos = state[b * STATE_INTS + STATE_POS];
      const int* tokens = seq + (size_t)b * (max_ctx + 1);
      for (int t = 0; t < T; t++)
        add_rows(out + ((size_t)b * T + t) * C, static_cast<const S*>(wte) + (size_t)tokens[pos + t] * C,
                 wpe ? static_cast<const S*>(wpe) + (size_t)(pos + t) * C : nullptr, C);
    }
  });
}
