// op_embed: token + position embedding of each sequence's rows of this step, the tables in their storage type
// (the body in cuda/embed.h).
#include "dispatch.h"
#include "embed.h"

template <typename W, int kWidth> __global__ void __launch_bounds__(kEmbedThreads) embed_kernel(EmbedArgs a) {
  embed<W, kWidth>(a, own_launch());
}

extern "C" void op_embed(float* out, const int* seq, const int* state, const void* wte, const void* wpe, int B, int T,
                         int C, int max_ctx, int wdtype) {
  if (rt_reject_unless(is_storage_type(wdtype) && B >= 1 && T >= 1)) return;
  with_storage(wdtype, [&](auto w) {
    using W = decltype(w);
    constexpr int V = kVecOf<W>;
    const bool vec = C % V == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    const EmbedArgs a = {.out = out,
                         .seq = seq,
                         .state = state,
                         .wte = wte,
                         .wpe = wpe,
                         .T = T,
                         .C = C,
                         .max_ctx = max_ctx,
                         .n_units = vec ? C / V : 0};
    const auto kernel = vec ? embed_kernel<W, V> : embed_kernel<W, 1>;
    const StepTaskForm task = {.kind = kTaskEmbed, .vec = vec, .variant = {.wdtype = wdtype}};
    launch_step_op(kernel, {.grid = dim3(T, B), .block = kEmbedThreads}, task, a);
  });
}
