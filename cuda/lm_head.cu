// op_lm_head: logits of the last row against the tied embedding; op_argmax: greedy next token.
#include <limits.h>
#include <math.h>

#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kLmHeadThreads = 256;
constexpr int kLmHeadWarps = kLmHeadThreads / kWarpSize;
constexpr int kLmHeadVecPerLane = 8;                              // 16-byte weight loads in flight per lane
constexpr int kLmHeadBatch = kLmHeadVecPerLane * kWarpSize;        // float4 of a row per batch: C <= 1024 in one
constexpr int kLmHeadBlocksPerSm = 4;
constexpr int kLmHeadMaxC = 12288;                                 // x is staged in 48 KB of shared memory
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxWarps = kArgmaxThreads / kWarpSize;
constexpr int kArgmaxVecPerThread = 4;                             // 16-byte loads in flight per thread
constexpr int kArgmaxVecPerBlock = kArgmaxThreads * kArgmaxVecPerThread;
constexpr int kArgmaxMergeBatch = 8;
static_assert(kArgmaxWarps <= kWarpSize, "the block's warp results fit one warp");

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

// logits: (V) = x (C) @ wte (V, C)^T    x = inp[T - 1]
// grid: (min(ceil(V / kLmHeadWarps), SMs x kLmHeadBlocksPerSm))  block: (kLmHeadThreads)
// Warp g of the grid takes rows g, g + G, ... (G warps in the grid). A lane holds 8 float4 of a row at a time
// (n_vec4 float4 per row, then a scalar tail), loaded before their first use; the next row's loads are
// issued before the current row's warp reduction. x is staged in shared memory once per block.
__global__ void __launch_bounds__(kLmHeadThreads, kLmHeadBlocksPerSm)
    lm_head_kernel(float* __restrict__ logits, const float* __restrict__ x, const float* __restrict__ wte, int C, int V,
                   int n_vec4, bool overlapped) {
  __shared__ float4 x_shared[kLmHeadMaxC / kVecWidth];
  float* xs = reinterpret_cast<float*>(x_shared);
  let_successor_start();
  const int lane = threadIdx.x % kWarpSize;
  const int stride = gridDim.x * kLmHeadWarps;
  int row = blockIdx.x * kLmHeadWarps + threadIdx.x / kWarpSize;
  float4 w[kLmHeadVecPerLane];
  load_row_batch(w, wte, row, 0, n_vec4, C, V);
  wait_for_predecessor(overlapped);  // x is the predecessor's output
  for (int i = threadIdx.x; i < C; i += kLmHeadThreads) xs[i] = __ldcg(x + i);
  __syncthreads();
  for (; row < V; row += stride) {  // whole warps only: row is uniform across the warp
    float acc = 0.0f;
    for (int base = 0;;) {
      acc += dot_batch(w, x_shared, base, n_vec4);
      base += kLmHeadBatch;
      if (base >= n_vec4) break;
      load_row_batch(w, wte, row, base, n_vec4, C, V);
    }
    for (int i = n_vec4 * kVecWidth + lane; i < C; i += kWarpSize) acc += xs[i] * __ldcg(wte + (size_t)row * C + i);
    load_row_batch(w, wte, row + stride, 0, n_vec4, C, V);  // the next row's first batch, in flight during the reduction
    acc = warp_sum(acc);
    if (lane == 0) logits[row] = acc;
  }
}

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

// The block's best (value, index), returned to every thread. warp_best, warp_index: __shared__[kArgmaxWarps].
__device__ __forceinline__ void block_argmax(float& best, int& best_index, float* warp_best, int* warp_index) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  warp_argmax(best, best_index);
  if (lane == 0) warp_best[warp] = best, warp_index[warp] = best_index;
  __syncthreads();
  best = lane < kArgmaxWarps ? warp_best[lane] : -INFINITY;
  best_index = lane < kArgmaxWarps ? warp_index[lane] : INT_MAX;
  warp_argmax(best, best_index);
}

// The argmax's scratch: (value, index) of every block after the arrival counter (cuda/last_block.h).
struct ArgmaxPartial {
  float value;
  int index;
};

// seq: (max_ctx + 1)  state: (STATE_INTS)  logits: (V)
// grid: (ceil(V / 4096))  block: (kArgmaxThreads). Block b scans float4 [1024 b, 1024 (b + 1)) of the logits
// (4 per thread, loaded before the first is used; the last block also the scalar tail), writes its best
// (value, index) to scratch, and the last block to arrive picks the best of the blocks' and writes the token.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int* __restrict__ seq, int* __restrict__ state, OpScratch scratch, const float* __restrict__ logits, int V,
                  int T, int max_ctx, int n_vec4) {
  __shared__ float warp_best[kArgmaxWarps];
  __shared__ int warp_index[kArgmaxWarps];
  __shared__ bool is_last;
  ArgmaxPartial* partials = reinterpret_cast<ArgmaxPartial*>(scratch.partials);
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
    for (int i = n_vec4 * kVecWidth + threadIdx.x; i < V; i += kArgmaxThreads)
      if (argmax_better(__ldcg(logits + i), i, best, best_index)) best = __ldcg(logits + i), best_index = i;
  block_argmax(best, best_index, warp_best, warp_index);
  if (threadIdx.x == 0) partials[blockIdx.x] = {best, best_index};
  if (!arrive_last(scratch.counters, gridDim.x, &is_last)) return;
  // the merge: every block's best, in batches of loads in flight; the result does not depend on the order
  best = -INFINITY;
  best_index = INT_MAX;
  for (int b0 = threadIdx.x; b0 < (int)gridDim.x; b0 += kArgmaxThreads * kArgmaxMergeBatch) {
    ArgmaxPartial p[kArgmaxMergeBatch];
#pragma unroll
    for (int k = 0; k < kArgmaxMergeBatch; k++) {
      const int b = b0 + k * kArgmaxThreads;
      p[k] = b < (int)gridDim.x ? ArgmaxPartial{__ldcg(&partials[b].value), __ldcg(&partials[b].index)} : ArgmaxPartial{-INFINITY, INT_MAX};
    }
#pragma unroll
    for (int k = 0; k < kArgmaxMergeBatch; k++)
      if (argmax_better(p[k].value, p[k].index, best, best_index)) best = p[k].value, best_index = p[k].index;
  }
  __syncthreads();  // the block's first reduction is done with the shared arrays
  block_argmax(best, best_index, warp_best, warp_index);
  if (threadIdx.x != 0) return;
  const int pos = __ldcg(state + STATE_POS);
  if (pos + T <= max_ctx) seq[pos + T] = best_index == INT_MAX ? 0 : best_index;  // INT_MAX: every logit NaN
  state[STATE_POS] = pos + T;
}

extern "C" void op_lm_head(float* logits, const float* inp, const float* wte, int T, int C, int V) {
  if (C > kLmHeadMaxC) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  const float* x = inp + (size_t)(T - 1) * C;
  const int n_vec4 = row_vec4_count(C, wte);
  const int blocks = min(ceil_div(V, kLmHeadWarps), rt_sm_count() * kLmHeadBlocksPerSm);
  LAUNCH(lm_head_kernel, blocks, kLmHeadThreads, logits, x, wte, C, V, n_vec4, rt_overlapped());
}

extern "C" void op_argmax(int* seq, int* state, const float* logits, int V, int T, int max_ctx) {
  const int n_vec4 = vec4_count(V, logits);
  const int blocks = max(1, ceil_div(n_vec4, kArgmaxVecPerBlock));
  const OpScratch scratch = rt_op_scratch();
  if (!scratch.counters || blocks * sizeof(ArgmaxPartial) > scratch.partial_floats * sizeof(float)) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  LAUNCH(argmax_kernel, blocks, kArgmaxThreads, seq, state, scratch, logits, V, T, max_ctx, n_vec4);
}
