// The embedding as device code: the body of op_embed's kernel (cuda/embed.cu) and of the persistent step's
// first task (cuda/persistent.cu).
#pragma once

#include "cols.h"
#include "dtypes.h"
#include "launch.h"
#include "ops.h"

constexpr int kEmbedThreads = 256;
constexpr int kEmbedChainL2Trips =
    2;  // dependent L2 round trips (the kernel model's chain): the state, the token id, then the rows

// out: (B·T, C) = wte[seq_b[pos_b + t]] + wpe[pos_b + t]     seq: (B, max_ctx + 1)  wte: (V, C)  wpe: (max_ctx, C) in
// W, or null (no position table: out = wte[seq_b[pos_b + t]])
struct EmbedArgs {
  float* out;
  const int* seq;
  const int* state;
  const void* wte;
  const void* wpe;
  int T, C, max_ctx;
  int n_units;  // 16-byte units at the start of each row (0: every element one by one)
};

// grid: (T, B)  block: (kEmbedThreads); the first n_units units of kWidth elements of each row go as 16-byte loads
// (4 floats or 8 halves, widened), the rest one by one.
template <typename W, int kWidth> __device__ __forceinline__ void embed(const EmbedArgs& a, const BlockPlace& at) {
  let_successor_start();
  wait_for_inputs(at);
  const int t = at.idx.x, b = at.idx.y, C = a.C;
  const int position = __ldcg(a.state + b * STATE_INTS + STATE_POS) + t;
  const W* te = static_cast<const W*>(a.wte) + (size_t)__ldcg(a.seq + (size_t)b * (a.max_ctx + 1) + position) * C;
  float* o = a.out + ((size_t)b * a.T + t) * C;
  if (a.wpe == nullptr) {  // rotary models: the token's row alone
    for (int i = threadIdx.x; i < a.n_units; i += blockDim.x) {
      const Packed<W, kWidth> e = load_packed<W, kWidth>(te + i * kWidth);
      Cols<kWidth> row;
#pragma unroll
      for (int k = 0; k < kWidth; k++) row.v[k] = widen(e, k);
      store_cols<kWidth>(o + i * kWidth, row);
    }
    for (int i = a.n_units * kWidth + threadIdx.x; i < C; i += blockDim.x) o[i] = widen(load_packed<W, 1>(te + i), 0);
    return;
  }
  const W* pe = static_cast<const W*>(a.wpe) + (size_t)position * C;
  for (int i = threadIdx.x; i < a.n_units; i += blockDim.x) {
    const Packed<W, kWidth> e = load_packed<W, kWidth>(te + i * kWidth), p = load_packed<W, kWidth>(pe + i * kWidth);
    Cols<kWidth> sum;
#pragma unroll
    for (int k = 0; k < kWidth; k++) sum.v[k] = widen(e, k) + widen(p, k);
    store_cols<kWidth>(o + i * kWidth, sum);
  }
  for (int i = a.n_units * kWidth + threadIdx.x; i < C; i += blockDim.x)
    o[i] = widen(load_packed<W, 1>(te + i), 0) + widen(load_packed<W, 1>(pe + i), 0);
}
