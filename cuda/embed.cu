// op_embed: token + position embedding of each sequence's rows of this step, the tables in their storage type.
#include "cols.h"
#include "dtypes.h"
#include "launch.h"
#include "ops.h"

constexpr int kEmbedThreads = 256;

// out: (B·T, C) = wte[seq_b[pos_b + t]] + wpe[pos_b + t]     seq: (B, max_ctx + 1)  wte: (V, C)  wpe: (max_ctx, C) in W
// grid: (T, B)  block: (kEmbedThreads); the first n_units units of kWidth elements of each row go as 16-byte loads
// (4 floats or 8 halves, widened), the rest one by one.
template <typename W, int kWidth>
__global__ void __launch_bounds__(kEmbedThreads)
    embed_kernel(float* __restrict__ out, const int* __restrict__ seq, const int* __restrict__ state, const W* __restrict__ wte,
                 const W* __restrict__ wpe, int T, int C, int max_ctx, int n_units) {
  let_successor_start();
  wait_for_predecessor();
  const int t = blockIdx.x, b = blockIdx.y;
  const int position = __ldcg(state + b * STATE_INTS + STATE_POS) + t;
  const W* te = wte + (size_t)__ldcg(seq + (size_t)b * (max_ctx + 1) + position) * C;
  const W* pe = wpe + (size_t)position * C;
  float* o = out + ((size_t)b * T + t) * C;
  for (int i = threadIdx.x; i < n_units; i += blockDim.x) {
    const Packed<W, kWidth> a = load_packed<W, kWidth>(te + i * kWidth), p = load_packed<W, kWidth>(pe + i * kWidth);
    Cols<kWidth> sum;
#pragma unroll
    for (int k = 0; k < kWidth; k++) sum.v[k] = widen(a, k) + widen(p, k);
    store_cols<kWidth>(o + i * kWidth, sum);
  }
  for (int i = n_units * kWidth + threadIdx.x; i < C; i += blockDim.x)
    o[i] = widen(load_packed<W, 1>(te + i), 0) + widen(load_packed<W, 1>(pe + i), 0);
}

extern "C" void op_embed(float* out, const int* seq, const int* state, const void* wte, const void* wpe, int B, int T, int C,
                         int max_ctx, int wdtype) {
  if (rt_reject_unless(is_storage_type(wdtype) && B >= 1 && T >= 1)) return;
  with_storage(wdtype, [&](auto w) {
    using W = decltype(w);
    constexpr int V = kVecOf<W>;
    const bool vec = C % V == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    const auto kernel = vec ? embed_kernel<W, V> : embed_kernel<W, 1>;
    LAUNCH(kernel, dim3(T, B), kEmbedThreads, out, seq, state, static_cast<const W*>(wte), static_cast<const W*>(wpe), T, C, max_ctx,
           vec ? C / V : 0);
  });
}
