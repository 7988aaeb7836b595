// op_lm_head: logits of the last row against the tied embedding; op_argmax: greedy next token;
// op_ln_lm_head_argmax: both, after the final layer norm, in one launch.
#include <limits.h>
#include <math.h>

#include <algorithm>

#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "row_stats.h"
#include "warp.h"

constexpr int kLmHeadThreads = 256;
constexpr int kLmHeadWarps = kLmHeadThreads / kWarpSize;
constexpr int kLmHeadVecPerLane = 8;                              // 16-byte weight loads in flight per lane
constexpr int kLmHeadBatch = kLmHeadVecPerLane * kWarpSize;        // float4 of a row per batch: C <= 1024 in one
constexpr int kLmHeadBlocksPerSm = 4;
constexpr int kLmHeadMinRowsPerWarp = 4;
constexpr int kLmHeadMaxC = 8192;                                  // x is staged in 32 KB of shared memory
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxVecPerThread = 4;                             // 16-byte loads in flight per thread
constexpr int kArgmaxVecPerBlock = kArgmaxThreads * kArgmaxVecPerThread;
constexpr int kArgmaxMergeBatch = 8;

// One batch of a vocab row's float4 for this lane: i = base + lane + 32 k, predicated off past the row (or V).
__device__ __forceinline__ void load_row_batch(float4 (&w)[kLmHeadVecPerLane], const float* __restrict__ wte, int row,
                                               int base, int n_vec4, int C, int V) {
  const int lane = threadIdx.x % kWarpSize;
  const float4* w4 = reinterpret_cast<const float4*>(wte + (size_t)row * C);
#pragma unroll
  for (int k = 0; k < kLmHeadVecPerLane; k++) {
    const int i = base + lane + k * kWarpSize;
    w[k] = row < V && i < n_vec4 ? __ldcg(w4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

__device__ __forceinline__ float dot_batch(const float4 (&w)[kLmHeadVecPerLane], const float4* x4, int base, int n_vec4) {
  const int lane = threadIdx.x % kWarpSize;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kLmHeadVecPerLane; k++) {
    const int i = base + lane + k * kWarpSize;
    if (i < n_vec4) {
      const float4 a = x4[i];
      acc += a.x * w[k].x + a.y * w[k].y + a.z * w[k].z + a.w * w[k].w;
    }
  }
  return acc;
}

// ---- argmax pieces, shared by op_argmax and the fused op_ln_lm_head_argmax --------------------------------------
// Is (value, index) a better argmax candidate than (best, best_index)? Larger wins, then the lower index; NaN
// never wins (every comparison with it is false).
__device__ __forceinline__ bool argmax_better(float value, int index, float best, int best_index) {
  return value > best || (value == best && index < best_index);
}

__device__ __forceinline__ void warp_argmax(float& best, int& best_index) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullWarpMask, best, offset);
    const int other_index = __shfl_xor_sync(kFullWarpMask, best_index, offset);
    if (argmax_better(other, other_index, best, best_index)) best = other, best_index = other_index;
  }
}

// The block's best (value, index), returned to every thread (blocks of up to 32 warps). Ends with a barrier,
// so the shared arrays can be reused at once. warp_best, warp_index: __shared__[kWarpSize].
__device__ __forceinline__ void block_argmax(float& best, int& best_index, float* warp_best, int* warp_index) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  warp_argmax(best, best_index);
  if (lane == 0) warp_best[warp] = best, warp_index[warp] = best_index;
  __syncthreads();
  best = lane < n_warps ? warp_best[lane] : -INFINITY;
  best_index = lane < n_warps ? warp_index[lane] : INT_MAX;
  warp_argmax(best, best_index);
  __syncthreads();
}

// A block's best (value, index) in the partials buffer, after the arrival counter (cuda/last_block.h).
struct ArgmaxPartial {
  float value;
  int index;
};

// Every block's best, merged by the last block to arrive; thread 0 then writes the token: seq[pos + T] (if
// pos + T <= max_ctx; 0 when every logit was NaN) and advances state[STATE_POS] by T. The result does not depend
// on the order the blocks arrived in. Call with every thread of the block, after the block's own best is in
// (best, best_index) of every thread.
__device__ __forceinline__ void argmax_finish(OpScratch scratch, int* seq, int* state, float best, int best_index, int T,
                                              int max_ctx, float* warp_best, int* warp_index, bool* is_last) {
  ArgmaxPartial* partials = reinterpret_cast<ArgmaxPartial*>(scratch.partials);
  if (threadIdx.x == 0) partials[blockIdx.x] = {best, best_index};
  if (!arrive_last(scratch.counters, gridDim.x, is_last)) return;
  best = -INFINITY;
  best_index = INT_MAX;
  for (int b0 = threadIdx.x; b0 < (int)gridDim.x; b0 += blockDim.x * kArgmaxMergeBatch) {
    ArgmaxPartial p[kArgmaxMergeBatch];
#pragma unroll
    for (int k = 0; k < kArgmaxMergeBatch; k++) {
      const int b = b0 + k * blockDim.x;
      p[k] = b < (int)gridDim.x ? ArgmaxPartial{__ldcg(&partials[b].value), __ldcg(&partials[b].index)}
                                : ArgmaxPartial{-INFINITY, INT_MAX};
    }
#pragma unroll
    for (int k = 0; k < kArgmaxMergeBatch; k++)
      if (argmax_better(p[k].value, p[k].index, best, best_index)) best = p[k].value, best_index = p[k].index;
  }
  block_argmax(best, best_index, warp_best, warp_index);
  if (threadIdx.x != 0) return;
  const int pos = __ldcg(state + STATE_POS);
  if (pos + T <= max_ctx) seq[pos + T] = best_index == INT_MAX ? 0 : best_index;  // INT_MAX: every logit NaN
  state[STATE_POS] = pos + T;
}

// ---- op_lm_head and op_ln_lm_head_argmax --------------------------------------------------------------------
struct LmHeadArgs {
  float* logits;
  const float* x;  // the row (C)
  const float* wte;
  int C, V, n_vec4;
  // the fused op: x layer-normed first, then the next token from the logits
  const float* ln_weight;
  const float* ln_bias;
  float eps;
  int* seq;
  int* state;
  OpScratch scratch;
  int max_ctx;
};

// logits: (V) = x (C) @ wte (V, C)^T; kFused: x layer-normed first, and the next token chosen from the logits.
// grid: (lm_head_blocks(V))  block: (kLmHeadThreads)
// Warp g of the grid takes rows g, g + G, ... (G warps in the grid). A lane holds 8 float4 of a row at a time
// (n_vec4 float4 per row, then a scalar tail), loaded before their first use; the next row's loads are
// issued before the current row's warp reduction. x is staged in shared memory once per block.
template <bool kFused>
__device__ __forceinline__ void lm_head(const LmHeadArgs& a, bool overlapped) {
  __shared__ float4 x_shared[kLmHeadMaxC / kVecWidth];
  __shared__ float partial[kWarpSize];
  __shared__ float warp_best[kWarpSize];
  __shared__ int warp_index[kWarpSize];
  __shared__ bool is_last;
  float* xs = reinterpret_cast<float*>(x_shared);
  let_successor_start();
  const int lane = threadIdx.x % kWarpSize;
  const int stride = gridDim.x * kLmHeadWarps;
  int row = blockIdx.x * kLmHeadWarps + threadIdx.x / kWarpSize;
  float4 w[kLmHeadVecPerLane];
  load_row_batch(w, a.wte, row, 0, a.n_vec4, a.C, a.V);
  wait_for_predecessor(overlapped);  // x is the predecessor's output
  if constexpr (kFused) {
    const RowStats st = stage_row_stats(xs, a.x, a.C, a.eps, partial);
    for (int i = threadIdx.x; i < a.C; i += kLmHeadThreads)  // the elements this thread staged
      xs[i] = (xs[i] - st.mean) * st.rstd * __ldcg(a.ln_weight + i) + __ldcg(a.ln_bias + i);
  } else {
    for (int i = threadIdx.x; i < a.C; i += kLmHeadThreads) xs[i] = __ldcg(a.x + i);
  }
  __syncthreads();
  float best = -INFINITY;
  int best_index = INT_MAX;
  for (; row < a.V; row += stride) {  // whole warps only: row is uniform across the warp
    float acc = 0.0f;
    for (int base = 0;;) {
      acc += dot_batch(w, x_shared, base, a.n_vec4);
      base += kLmHeadBatch;
      if (base >= a.n_vec4) break;
      load_row_batch(w, a.wte, row, base, a.n_vec4, a.C, a.V);
    }
    for (int i = a.n_vec4 * kVecWidth + lane; i < a.C; i += kWarpSize) acc += xs[i] * __ldcg(a.wte + (size_t)row * a.C + i);
    load_row_batch(w, a.wte, row + stride, 0, a.n_vec4, a.C, a.V);  // the next row's first batch, in flight during the reduction
    acc = warp_sum(acc);
    if (lane == 0) a.logits[row] = acc;
    if (kFused && argmax_better(acc, row, best, best_index)) best = acc, best_index = row;
  }
  if constexpr (kFused) {
    block_argmax(best, best_index, warp_best, warp_index);
    argmax_finish(a.scratch, a.seq, a.state, best, best_index, 1, a.max_ctx, warp_best, warp_index, &is_last);
  }
}

__global__ void __launch_bounds__(kLmHeadThreads, kLmHeadBlocksPerSm) lm_head_kernel(LmHeadArgs a, bool overlapped) {
  lm_head<false>(a, overlapped);
}
__global__ void __launch_bounds__(kLmHeadThreads, kLmHeadBlocksPerSm) ln_lm_head_argmax_kernel(LmHeadArgs a, bool overlapped) {
  lm_head<true>(a, overlapped);
}

// Enough blocks to fill every SM kLmHeadBlocksPerSm deep, but at least kLmHeadMinRowsPerWarp rows per warp: each
// block stages (and, fused, layer-norms) x once, so a small vocabulary does not pay that in hundreds of blocks.
static int lm_head_blocks(int V) {
  return min(ceil_div(V, kLmHeadWarps * kLmHeadMinRowsPerWarp), rt_sm_count() * kLmHeadBlocksPerSm);
}

// ---- op_argmax --------------------------------------------------------------------------------------------------
// seq: (max_ctx + 1)  state: (STATE_INTS)  logits: (V)
// grid: (ceil(V / 4096))  block: (kArgmaxThreads). Block b scans float4 [1024 b, 1024 (b + 1)) of the logits
// (4 per thread, loaded before the first is used; the last block also the scalar tail); the last block to arrive
// picks the best of the blocks' and writes the token.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int* __restrict__ seq, int* __restrict__ state, OpScratch scratch, const float* __restrict__ logits, int V,
                  int T, int max_ctx, int n_vec4) {
  __shared__ float warp_best[kWarpSize];
  __shared__ int warp_index[kWarpSize];
  __shared__ bool is_last;
  let_successor_start();
  wait_for_predecessor();
  const float4* l4 = reinterpret_cast<const float4*>(logits);
  const int first = blockIdx.x * kArgmaxVecPerBlock + threadIdx.x;
  float4 v[kArgmaxVecPerThread];
#pragma unroll
  for (int k = 0; k < kArgmaxVecPerThread; k++) {
    const int i = first + k * kArgmaxThreads;
    v[k] = i < n_vec4 ? __ldcg(l4 + i) : make_float4(NAN, NAN, NAN, NAN);
  }
  float best = -INFINITY;
  int best_index = INT_MAX;  // loses every tie, so an all -inf row still yields its lowest index
#pragma unroll
  for (int k = 0; k < kArgmaxVecPerThread; k++) {
    const int i = (first + k * kArgmaxThreads) * kVecWidth;
    const float e[kVecWidth] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (int j = 0; j < kVecWidth; j++)
      if (argmax_better(e[j], i + j, best, best_index)) best = e[j], best_index = i + j;
  }
  if (blockIdx.x == gridDim.x - 1)
    for (int i = n_vec4 * kVecWidth + threadIdx.x; i < V; i += kArgmaxThreads) {
      const float e = __ldcg(logits + i);
      if (argmax_better(e, i, best, best_index)) best = e, best_index = i;
    }
  block_argmax(best, best_index, warp_best, warp_index);
  argmax_finish(scratch, seq, state, best, best_index, T, max_ctx, warp_best, warp_index, &is_last);
}

static int argmax_blocks(int V) { return max(1, ceil_div(V / kVecWidth, kArgmaxVecPerBlock)); }

extern "C" size_t op_partials_bytes(int, int max_in, int max_out, int V) {
  const size_t argmax_bytes = (size_t)max(argmax_blocks(V), lm_head_blocks(V)) * sizeof(ArgmaxPartial);
  return op_scratch_bytes(std::max(matvec_partials_bytes(max_in, max_out), argmax_bytes));
}

extern "C" void op_lm_head(float* logits, const float* inp, const void* wte, int B, int T, int C, int V, int wdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32 && C <= kLmHeadMaxC)) return;
  LmHeadArgs a = {};
  a.logits = logits, a.x = inp + (size_t)(T - 1) * C, a.wte = static_cast<const float*>(wte), a.C = C, a.V = V, a.n_vec4 = row_vec4_count(C, wte);
  LAUNCH(lm_head_kernel, lm_head_blocks(V), kLmHeadThreads, a, rt_overlapped());
}

extern "C" void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                                     const float* ln_bias, const void* wte, int B, int C, int V, int max_ctx, float eps, int wdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32 && C <= kLmHeadMaxC)) return;
  LmHeadArgs a = {};
  a.logits = logits, a.x = x, a.wte = static_cast<const float*>(wte), a.C = C, a.V = V, a.n_vec4 = row_vec4_count(C, wte);
  a.ln_weight = ln_weight, a.ln_bias = ln_bias, a.eps = eps, a.seq = seq, a.state = state, a.scratch = op_scratch(partials);
  a.max_ctx = max_ctx;
  LAUNCH(ln_lm_head_argmax_kernel, lm_head_blocks(V), kLmHeadThreads, a, rt_overlapped());
}

extern "C" void op_argmax(int* seq, int* state, float* partials, const float* logits, int B, int V, int T, int max_ctx) {
  if (rt_reject_unless(B == 1)) return;
  const int n_vec4 = vec4_count(V, logits);
  LAUNCH(argmax_kernel, argmax_blocks(V), kArgmaxThreads, seq, state, op_scratch(partials), logits, V, T, max_ctx, n_vec4);
}
