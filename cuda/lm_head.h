// The LM head and the argmax pieces as device code: the bodies of cuda/lm_head.cu's kernels and of the persistent
// step's last task (cuda/persistent.cu).
#pragma once

#include <limits.h>
#include <math.h>

#include <algorithm>

#include "cols.h"
#include "dtypes.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "row_stats.h"
#include "warp.h"

constexpr int kLmHeadThreads = 256;
constexpr int kLmHeadWarps = kLmHeadThreads / kWarpSize;
constexpr int kLmHeadRowsPerWarp = 4;     // vocabulary rows a warp works on at once
constexpr int kLmHeadChunksPerBatch = 2;  // 16-byte chunks of each of those rows per lane and batch: 8 loads in flight
constexpr int kLmHeadBatchChunks = kLmHeadChunksPerBatch * kWarpSize;   // chunks of a row per batch
constexpr int kLmHeadRowsPerBlock = kLmHeadWarps * kLmHeadRowsPerWarp;  // vocabulary rows a block's warps take first
constexpr int kLmHeadMaxRows = MAX_BATCH;                               // sequences per launch (op_table.h)
static_assert(kLmHeadRowsPerWarp * kLmHeadMaxRows <= kWarpSize, "a warp's sums spread over its lanes");
constexpr int kLmHeadMaxFloats = 8192;  // the sequences' rows x staged in 32 KB of shared memory
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxVecPerThread = 4;  // 16-byte loads in flight per thread
constexpr int kArgmaxVecPerBlock = kArgmaxThreads * kArgmaxVecPerThread;
constexpr int kArgmaxMergeBatch = 8;
// Dependent L2 round trips besides the data stream (the kernel model's chain): the LM head stages x after the wait
// (the weights already in flight); argmax has its merge; the fused op the layer norm's row, then the argmax merge.
constexpr int kLmHeadChainL2Trips = 1;
constexpr int kArgmaxChainL2Trips = 3;
constexpr int kLnLmHeadArgmaxChainL2Trips = 4;
// Blocks of kLmHeadThreads per SM the LM head's instantiation for `rows` sequences is compiled for (cuda/lm_head.cu).
int lm_head_min_blocks_per_sm(int rows);

// ---- argmax pieces, shared by op_argmax and the fused op_ln_lm_head_argmax --------------------------------------
// Is (value, index) a better argmax candidate than (best, best_index)? Larger wins, then the lower index; NaN
// never wins (every comparison with it is false). The best of a set is the same in any order of comparison.
__device__ __forceinline__ bool argmax_better(float value, int index, float best, int best_index) {
  return value > best || (value == best && index < best_index);
}

// The best over the lanes that differ from this one in the bits of `lane_bits` (every lane ends with its set's best).
__device__ __forceinline__ void warp_argmax(float& best, int& best_index, unsigned lane_bits = kWarpSize - 1) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    if (!(lane_bits & offset)) continue;
    const float other = __shfl_xor_sync(kFullWarpMask, best, offset);
    const int other_index = __shfl_xor_sync(kFullWarpMask, best_index, offset);
    if (argmax_better(other, other_index, best, best_index)) best = other, best_index = other_index;
  }
}

// A block's (or a sequence's) best (value, index) in the partials buffer, after the arrival counter
// (cuda/last_block.h).
struct ArgmaxPartial {
  float value;
  int index;
};

// The last block to arrive: for each sequence b < n (n <= kSeqs), the best of partials[b * blocks + k], k < blocks,
// found by the block's threads kLmHeadThreads / kSeqs per sequence (whole warps); then the sequence's token:
// seq_b[pos_b + T] (if pos_b + T <= max_ctx; 0 when every logit was NaN), and state_b[STATE_POS] += T.
// warp_best: __shared__ ArgmaxPartial[kSeqs][kWarpSize].
template <int kSeqs>
__device__ __forceinline__ void argmax_merge(const ArgmaxPartial* partials, int blocks, int n, int* seq, int* state,
                                             int T, int max_ctx, ArgmaxPartial (*warp_best)[kWarpSize]) {
  constexpr int kGroup = kArgmaxThreads / kSeqs;  // threads per sequence
  static_assert(kGroup % kWarpSize == 0, "a sequence's threads are whole warps");
  const int b = threadIdx.x / kGroup, j = threadIdx.x % kGroup;
  float best = -INFINITY;
  int best_index = INT_MAX;
  for (int k0 = j; k0 < blocks; k0 += kGroup * kArgmaxMergeBatch) {
    ArgmaxPartial p[kArgmaxMergeBatch];
#pragma unroll
    for (int i = 0; i < kArgmaxMergeBatch; i++) {
      const int k = k0 + i * kGroup;
      const ArgmaxPartial* at = partials + (size_t)b * blocks + k;
      p[i] = b < n && k < blocks ? ArgmaxPartial{__ldcg(&at->value), __ldcg(&at->index)}
                                 : ArgmaxPartial{-INFINITY, INT_MAX};
    }
#pragma unroll
    for (int i = 0; i < kArgmaxMergeBatch; i++)
      if (argmax_better(p[i].value, p[i].index, best, best_index)) best = p[i].value, best_index = p[i].index;
  }
  warp_argmax(best, best_index);
  const int lane = threadIdx.x % kWarpSize, warp_in_group = j / kWarpSize;
  if (lane == 0) warp_best[b][warp_in_group] = {best, best_index};
  __syncthreads();
  if (j != 0 || b >= n) return;
  for (int w = 1; w < kGroup / kWarpSize; w++)
    if (argmax_better(warp_best[b][w].value, warp_best[b][w].index, best, best_index))
      best = warp_best[b][w].value, best_index = warp_best[b][w].index;
  int* pos = state + b * STATE_INTS + STATE_POS;
  const int next = __ldcg(pos) + T;
  if (next <= max_ctx)
    seq[(size_t)b * (max_ctx + 1) + next] = best_index == INT_MAX ? 0 : best_index;  // INT_MAX: all NaN
  *pos = next;
}

// ---- op_lm_head and op_ln_lm_head_argmax --------------------------------------------------------------------
// Sequences [0, rows) of one launch (the launcher offsets every pointer to the launch's first sequence).
struct LmHeadArgs {
  float* logits;   // (rows, V)
  const float* x;  // row b at x + b * x_stride (C)
  int x_stride;
  const void* wte;  // (V, C) in the kernel's storage type
  int rows, C, V;
  int n_chunks;  // 16-byte chunks per vocabulary row read as such (0: every element one by one)
  // the fused op: x layer-normed first, then each sequence's next token from its logits
  const float* ln_weight;
  const float* ln_bias;
  float eps;
  int* seq;    // (rows, max_ctx + 1)
  int* state;  // (rows, STATE_INTS)
  OpScratch scratch;
  int max_ctx;
};

// A lane's weights of one batch: chunks base + lane + 32 j (j < 2) of the warp's 4 rows from row0, predicated off
// past the chunks or V.
template <typename W, int kWidth> struct LmHeadBatch {
  Packed<W, kWidth> w[kLmHeadRowsPerWarp][kLmHeadChunksPerBatch];
};

template <typename W, int kWidth>
__device__ __forceinline__ void load_batch(LmHeadBatch<W, kWidth>& batch, const LmHeadArgs& a, int row0, int base) {
  const int lane = threadIdx.x % kWarpSize;
  const W* wte = static_cast<const W*>(a.wte);
#pragma unroll
  for (int r = 0; r < kLmHeadRowsPerWarp; r++)
#pragma unroll
    for (int j = 0; j < kLmHeadChunksPerBatch; j++) {
      const int row = row0 + r, chunk = base + lane + j * kWarpSize;
      batch.w[r][j] = row < a.V && chunk < a.n_chunks
                          ? load_packed<W, kWidth>(wte + (size_t)row * a.C + (size_t)chunk * kWidth)
                          : Packed<W, kWidth>{};
    }
}

// acc[r][b] += the batch's chunks of row r · x_b (x staged in shared memory, xs + b * C), element by element in order.
template <typename W, int kWidth, int kRows>
__device__ __forceinline__ void dot_batch(float (&acc)[kLmHeadRowsPerWarp][kRows], const LmHeadBatch<W, kWidth>& batch,
                                          const float* xs, int base, const LmHeadArgs& a) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int j = 0; j < kLmHeadChunksPerBatch; j++) {
    const int chunk = base + lane + j * kWarpSize;
    if (chunk >= a.n_chunks) continue;
#pragma unroll
    for (int b = 0; b < kRows; b++) {
      float x[kWidth];
#pragma unroll
      for (int q = 0; q < kWidth; q += 4) {
        const float4 v = reinterpret_cast<const float4*>(xs + b * a.C + chunk * kWidth)[q / 4];
        x[q] = v.x, x[q + 1] = v.y, x[q + 2] = v.z, x[q + 3] = v.w;
      }
#pragma unroll
      for (int r = 0; r < kLmHeadRowsPerWarp; r++)
#pragma unroll
        for (int k = 0; k < kWidth; k++) acc[r][b] += x[k] * widen(batch.w[r][j], k);
    }
  }
}

// The warp's sums of n values per lane, spread over the lanes: halving by exchange (offsets 16, 8, ...) while a
// lane holds more than one, then a plain butterfly. Each value's sum is warp_sum's tree (cuda/warp.h), so every
// lane holding value i = lane >> (5 - log2 n) has the same bits as a warp_sum of it would.
template <int n> __device__ __forceinline__ float warp_sum_spread(float (&v)[n]) {
  const int lane = threadIdx.x % kWarpSize;
  int held = n;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    if (held > 1) {
      const bool upper = lane & offset;
      held /= 2;
#pragma unroll
      for (int i = 0; i < n / 2; i++) {
        if (i >= held) break;
        const float send = upper ? v[i] : v[i + held], keep = upper ? v[i + held] : v[i];
        v[i] = keep + __shfl_xor_sync(kFullWarpMask, send, offset);
      }
    } else {
      v[0] += __shfl_xor_sync(kFullWarpMask, v[0], offset);
    }
  }
  return v[0];
}

template <int n> __host__ __device__ constexpr int log2_of() { return n <= 1 ? 0 : 1 + log2_of<n / 2>(); }

// The LM head alone, or fused: the final norm (GPT-2's layer norm, the Llama family's RMSNorm) first and each
// sequence's next token after.
enum LmHeadOp { kLmHeadOnly, kLnLmHeadArgmax, kRmsLmHeadArgmax };
__host__ __device__ constexpr bool picks_token(LmHeadOp op) { return op != kLmHeadOnly; }

// Stages the sequences' rows in xs (xs + b * C for b < a.rows; the sums of the rest are never stored), normalised
// first by the fused ops (RMSNorm as op_rmsnorm: x · rstd · weight).
template <int kRows, LmHeadOp kOp> __device__ __forceinline__ void stage_x(float* xs, const LmHeadArgs& a) {
  if constexpr (picks_token(kOp)) {
    constexpr bool kRms = kOp == kRmsLmHeadArgmax;
    __shared__ float partial[kRows][kWarpSize];
    RowStats st[kRows];
    stage_rows_stats<kRows, kRms>(st, xs, a.x, a.rows, a.C, a.eps, partial);
    for (int i = threadIdx.x; i < a.C; i += kLmHeadThreads) {  // the elements this thread staged
      const float g = __ldcg(a.ln_weight + i), beta = kRms ? 0.0f : __ldcg(a.ln_bias + i);
#pragma unroll
      for (int b = 0; b < kRows; b++) {
        if (b >= a.rows) continue;
        const float x = xs[b * a.C + i];
        xs[b * a.C + i] = kRms ? x * st[b].rstd * g : (x - st[b].mean) * st[b].rstd * g + beta;
      }
    }
  } else {
    for (int i = threadIdx.x; i < a.C; i += kLmHeadThreads)
#pragma unroll
      for (int b = 0; b < kRows; b++)
        if (b < a.rows) xs[b * a.C + i] = __ldcg(a.x + (size_t)b * a.x_stride + i);
  }
  __syncthreads();
}

// logits: (rows, V) = x_b (C) @ wte (V, C)^T for each sequence b; picks_token(kOp): each x_b normalised first, and each
// sequence's next token chosen from its logits. grid: (lm_head_blocks)  block: (kLmHeadThreads)
// Warp g of the grid takes the groups of 4 vocabulary rows g, g + G, ... (G warps in the grid). A lane loads 2
// chunks (16 bytes) of each of the 4 rows per batch, 8 loads before their first use, and every load feeds all
// the sequences' sums; the next group's first batch is issued before the current group's warp reduction. x is
// staged in shared memory once per block.
// The persistent step's look-ahead for virtual block `at` (cuda/persistent.cu): the vocabulary rows its warps
// take first, 32 consecutive rows.
template <typename W> __device__ __forceinline__ L2Lines lm_head_lines(const LmHeadArgs& a, const BlockPlace& at) {
  const int row0 = at.idx.x * kLmHeadRowsPerBlock;
  if (row0 >= a.V) return {};
  const size_t row_bytes = (size_t)a.C * sizeof(W);
  return {reinterpret_cast<const char*>(static_cast<const W*>(a.wte) + (size_t)row0 * a.C), nullptr, row_bytes,
          min(kLmHeadRowsPerBlock, a.V - row0), (int)row_bytes};
}

// The block's shared memory: the sequences' rows of x.
struct LmHeadShared {
  float4 x4[kLmHeadMaxFloats / 4];
};

template <typename W, int kWidth, int kRows, LmHeadOp kOp>
__device__ __forceinline__ void lm_head(const LmHeadArgs& a, const BlockPlace& at, LmHeadShared& shared) {
  constexpr int kValues = kLmHeadRowsPerWarp * kRows;  // a lane's sums: (row r, sequence b) at r * kRows + b
  constexpr int kShift = 5 - log2_of<kValues>();       // the lanes holding value i: i << kShift and up
  __shared__ ArgmaxPartial warp_best[kRows][kWarpSize];
  __shared__ bool is_last;
  float* xs = reinterpret_cast<float*>(shared.x4);
  let_successor_start();
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int stride = at.grid.x * kLmHeadWarps * kLmHeadRowsPerWarp;
  int row0 = (at.idx.x * kLmHeadWarps + warp) * kLmHeadRowsPerWarp;
  LmHeadBatch<W, kWidth> batch;
  load_batch(batch, a, row0, 0);
  wait_for_inputs(at);  // x is the predecessor's output
  stage_x<kRows, kOp>(xs, a);
  const int mine = lane >> kShift, my_row = mine / kRows, my_seq = mine % kRows;
  const bool owner = (lane & ((1 << kShift) - 1)) == 0;
  float best = -INFINITY;
  int best_index = INT_MAX;
  for (; row0 < a.V; row0 += stride) {  // whole warps only: row0 is uniform across the warp
    float acc[kLmHeadRowsPerWarp][kRows] = {};
    for (int base = 0;;) {
      dot_batch<W, kWidth, kRows>(acc, batch, xs, base, a);
      base += kLmHeadBatchChunks;
      if (base >= a.n_chunks) break;
      load_batch(batch, a, row0, base);
    }
    for (int i = a.n_chunks * kWidth + lane; i < a.C; i += kWarpSize)  // the elements past the chunks, one by one
#pragma unroll
      for (int r = 0; r < kLmHeadRowsPerWarp; r++) {
        const float w = row0 + r < a.V
                            ? widen(load_packed<W, 1>(static_cast<const W*>(a.wte) + (size_t)(row0 + r) * a.C + i), 0)
                            : 0.0f;
#pragma unroll
        for (int b = 0; b < kRows; b++) acc[r][b] += xs[b * a.C + i] * w;
      }
    load_batch(batch, a, row0 + stride, 0);  // the next group's first batch, in flight during the reduction
    float v[kValues];
#pragma unroll
    for (int r = 0; r < kLmHeadRowsPerWarp; r++)
#pragma unroll
      for (int b = 0; b < kRows; b++) v[r * kRows + b] = acc[r][b];
    const float logit = warp_sum_spread(v);
    const int row = row0 + my_row;
    if (row < a.V && my_seq < a.rows) {
      if (owner) a.logits[(size_t)my_seq * a.V + row] = logit;
      if (picks_token(kOp) && argmax_better(logit, row, best, best_index)) best = logit, best_index = row;
    }
  }
  if constexpr (picks_token(kOp)) {
    // each sequence's best over the lanes holding it (lanes differing outside its bits), then over the warps
    warp_argmax(best, best_index, (kWarpSize - 1) & ~((unsigned)(kRows - 1) << kShift));
    if ((lane & ~((kRows - 1) << kShift)) == 0) warp_best[my_seq][warp] = {best, best_index};
    __syncthreads();
    ArgmaxPartial* partials = reinterpret_cast<ArgmaxPartial*>(a.scratch.partials);
    if (warp <
        ceil_div(kRows * kLmHeadWarps, kWarpSize)) {  // thread (b, w): warp w's best of sequence b, then the block's
      const int b = threadIdx.x / kLmHeadWarps, w = threadIdx.x % kLmHeadWarps;
      float block_best = b < kRows ? warp_best[b][w].value : -INFINITY;
      int block_index = b < kRows ? warp_best[b][w].index : INT_MAX;
      warp_argmax(block_best, block_index, kLmHeadWarps - 1);
      if (w == 0 && b < a.rows) partials[(size_t)b * at.grid.x + at.idx.x] = {block_best, block_index};
    }
    if (!arrive_last(a.scratch.counters, at.grid.x, &is_last)) return;
    argmax_merge<kRows>(partials, at.grid.x, a.rows, a.seq, a.state, 1, a.max_ctx, warp_best);
  }
}
