// op_lm_head: logits of each sequence's last row against the tied embedding; op_argmax: greedy next token of each
// sequence; op_ln_lm_head_argmax: both, after the final layer norm, in one launch.
#include "dispatch.h"
#include "lm_head.h"

// Blocks of 256 threads per SM the instantiation for `rows` sequences is compiled for: its registers allow that many.
__host__ __device__ constexpr int lm_head_min_blocks(int rows) { return rows <= 1 ? 4 : rows <= 2 ? 3 : 2; }
int lm_head_min_blocks_per_sm(int rows) { return lm_head_min_blocks(rows); }

#define LM_HEAD_KERNEL(name, op)                                                                                     \
  template <typename W, int kWidth, int kRows>                                                                       \
  __global__ void __launch_bounds__(kLmHeadThreads, lm_head_min_blocks(kRows)) name(LmHeadArgs a, Overlap overlap) { \
    __shared__ LmHeadShared shared;                                                                                  \
    lm_head<W, kWidth, kRows, op>(a, own_launch(overlap), shared);                                                   \
  }
LM_HEAD_KERNEL(lm_head_kernel, kLmHeadOnly)
LM_HEAD_KERNEL(ln_lm_head_argmax_kernel, kLnLmHeadArgmax)
LM_HEAD_KERNEL(rms_lm_head_argmax_kernel, kRmsLmHeadArgmax)
#undef LM_HEAD_KERNEL

using LmHeadKernel = void (*)(LmHeadArgs, Overlap);

template <LmHeadOp kOp, typename W, int kRows> LmHeadKernel lm_head_kernel_of() {
  if constexpr (kOp == kLnLmHeadArgmax)
    return ln_lm_head_argmax_kernel<W, kVecOf<W>, kRows>;
  else if constexpr (kOp == kRmsLmHeadArgmax)
    return rms_lm_head_argmax_kernel<W, kVecOf<W>, kRows>;
  else
    return lm_head_kernel<W, kVecOf<W>, kRows>;
}
// The instantiation for `rows` sequences: batch_bucket(rows) rows of x accumulated.
template <LmHeadOp kOp, typename W> LmHeadKernel pick_lm_head(int rows) {
  static_assert(kLmHeadMaxRows == MAX_BATCH, "the largest bucket is a whole batch");
  return with_batch_bucket(rows, [](auto bucket) { return lm_head_kernel_of<kOp, W, decltype(bucket)::value>(); });
}

// Enough blocks to fill every SM as deep as the instantiation's registers allow, but at least one group of 4 rows
// per warp: each block stages (and, fused, layer-norms) x once.
static int lm_head_blocks(int V, int rows) {
  return min(ceil_div(V, kLmHeadWarps * kLmHeadRowsPerWarp), rt_sm_count() * lm_head_min_blocks(rows));
}

// Sequences per launch: the largest instantiation whose staged x fits kLmHeadMaxFloats, since the kernel reads
// kRows rows of x however many hold sequences (C = 1600: 4 per launch, not 5 in an 8-row kernel); halving from
// MAX_BATCH steps through batch_bucket's sizes.
static int lm_head_rows_per_launch(int C) {
  int rows = kLmHeadMaxRows;
  while (rows > 1 && rows * C > kLmHeadMaxFloats) rows /= 2;
  return rows;
}

// One launch per group of sequences that fits (one for GPT-2 small's C = 768 up to 8 sequences); `a` holds the
// whole batch's pointers and B in a.rows.
template <LmHeadOp kOp> static void launch_lm_head(LmHeadArgs a, int wdtype) {
  if (rt_reject_unless(is_storage_type(wdtype) && a.rows >= 1 && a.C >= 1 && a.C <= kLmHeadMaxFloats)) return;
  const int B = a.rows, per_launch = lm_head_rows_per_launch(a.C);
  with_storage(wdtype, [&](auto w) {
    using W = decltype(w);
    a.n_chunks = a.C % kVecOf<W> == 0 && aligned16(a.wte) ? a.C / kVecOf<W> : 0;
    for (int s0 = 0; s0 < B; s0 += per_launch) {
      LmHeadArgs g = a;
      g.rows = std::min(per_launch, B - s0);
      g.logits = a.logits + (size_t)s0 * a.V;
      g.x = a.x + (size_t)s0 * a.x_stride;
      if (picks_token(kOp)) {
        g.seq = a.seq + (size_t)s0 * (a.max_ctx + 1);
        g.state = a.state + s0 * STATE_INTS;
      }
      if (rt_reject_unless(batch_bucket(g.rows) * a.C <= kLmHeadMaxFloats)) return;  // x's rows the kernel reads fit
      const LmHeadKernel kernel = pick_lm_head<kOp, W>(g.rows);
      const Geometry at = {.grid = lm_head_blocks(a.V, g.rows), .block = kLmHeadThreads};
      const StepTaskKind kind = kOp == kRmsLmHeadArgmax ? kTaskRmsLmHeadArgmax : kTaskLnLmHeadArgmax;
      const StepTaskForm task = {
          .kind = kind,
          .vec = true,
          .variant = {.wdtype = wdtype, .rows = batch_bucket(g.rows), .arch = step_arch_of(kind)}};
      if constexpr (picks_token(kOp))
        launch_step_op(kernel, at, task, g);
      else
        launch_op(kernel, at, g);
    }
  });
}

// ---- op_argmax --------------------------------------------------------------------------------------------------
// seq: (B, max_ctx + 1)  state: (B, STATE_INTS)  logits: (B, V)
// grid: (ceil(V / 4096), B)  block: (kArgmaxThreads). Block (k, b) scans elements [4096 k, 4096 (k + 1)) of sequence
// b's logits, 16 per thread loaded before the first is used: 4 float4 when every row starts 16-byte aligned (kWidth
// 4; the row's last V % 4 elements then one by one in its last block), else 16 floats. The last block of sequence b
// to arrive picks the best of its blocks' and writes the token.
template <int kWidth>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int* __restrict__ seq, int* __restrict__ state, OpScratch scratch, const float* __restrict__ logits,
                  int V, int T, int max_ctx) {
  constexpr int kLoads = kArgmaxVecPerThread * kVecWidth / kWidth;
  __shared__ ArgmaxPartial warp_best[1][kWarpSize];
  __shared__ bool is_last;
  let_successor_start();
  wait_for_predecessor();
  const int b = blockIdx.y;
  const float* row = logits + (size_t)b * V;
  const int n_units = V / kWidth;  // whole units of the row
  const int first = blockIdx.x * (kArgmaxVecPerBlock * kVecWidth / kWidth) + threadIdx.x;
  Cols<kWidth> v[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; k++) {
    const int i = first + k * kArgmaxThreads;
    if (i < n_units)
      v[k] = load_cols<kWidth>(row + i * kWidth);
    else
#pragma unroll
      for (int j = 0; j < kWidth; j++) v[k].v[j] = NAN;
  }
  float best = -INFINITY;
  int best_index = INT_MAX;  // loses every tie, so an all -inf row still yields its lowest index
#pragma unroll
  for (int k = 0; k < kLoads; k++) {
    const int i = (first + k * kArgmaxThreads) * kWidth;
#pragma unroll
    for (int j = 0; j < kWidth; j++)
      if (argmax_better(v[k].v[j], i + j, best, best_index)) best = v[k].v[j], best_index = i + j;
  }
  if (blockIdx.x == gridDim.x - 1)
    for (int i = n_units * kWidth + threadIdx.x; i < V; i += kArgmaxThreads) {
      const float e = __ldcg(row + i);
      if (argmax_better(e, i, best, best_index)) best = e, best_index = i;
    }
  // the block's best: each warp's, then warp 0 over the warps
  warp_argmax(best, best_index);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_best[0][warp] = {best, best_index};
  __syncthreads();
  ArgmaxPartial* partials = reinterpret_cast<ArgmaxPartial*>(scratch.partials) + (size_t)b * gridDim.x;
  if (warp == 0) {
    best = lane < kArgmaxThreads / kWarpSize ? warp_best[0][lane].value : -INFINITY;
    best_index = lane < kArgmaxThreads / kWarpSize ? warp_best[0][lane].index : INT_MAX;
    warp_argmax(best, best_index);
    if (lane == 0) partials[blockIdx.x] = {best, best_index};
  }
  if (!arrive_last(scratch.counters + b, gridDim.x, &is_last)) return;
  argmax_merge<1>(partials, gridDim.x, 1, seq + (size_t)b * (max_ctx + 1), state + b * STATE_INTS, T, max_ctx,
                  warp_best);
}

static int argmax_blocks(int V) { return max(1, ceil_div(V, kArgmaxVecPerBlock * kVecWidth)); }

extern "C" size_t op_partials_bytes(int max_rows, int max_in, int max_out, int V) {
  const int rows = std::max(max_rows, 1);
  const size_t argmax_bytes =
      (size_t)std::max(argmax_blocks(V) * rows, lm_head_blocks(V, rows) * std::min(rows, kLmHeadMaxRows)) *
      sizeof(ArgmaxPartial);
  return op_scratch_bytes(std::max(matvec_partials_bytes(rows, max_in, max_out), argmax_bytes));
}

extern "C" void op_lm_head(float* logits, const float* inp, const void* wte, int B, int T, int C, int V, int wdtype) {
  const LmHeadArgs a = {
      .logits = logits, .x = inp + (size_t)(T - 1) * C, .x_stride = T * C, .wte = wte, .rows = B, .C = C, .V = V};
  launch_lm_head<kLmHeadOnly>(a, wdtype);
}

extern "C" void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x,
                                     const float* ln_weight, const float* ln_bias, const void* wte, int B, int C, int V,
                                     int max_ctx, float eps, int wdtype) {
  const LmHeadArgs a = {.logits = logits,
                        .x = x,
                        .x_stride = C,
                        .wte = wte,
                        .rows = B,
                        .C = C,
                        .V = V,
                        .ln_weight = ln_weight,
                        .ln_bias = ln_bias,
                        .eps = eps,
                        .seq = seq,
                        .state = state,
                        .scratch = op_scratch(partials),
                        .max_ctx = max_ctx};
  launch_lm_head<kLnLmHeadArgmax>(a, wdtype);
}

extern "C" void op_argmax(int* seq, int* state, float* partials, const float* logits, int B, int V, int T,
                          int max_ctx) {
  if (rt_reject_unless(B >= 1 && B <= kMaxGridCounters)) return;
  const dim3 grid(argmax_blocks(V), B);
  const bool vec = aligned16(logits) && (B == 1 || V % kVecWidth == 0);  // every sequence's row starts 16-byte aligned
  const auto kernel = vec ? argmax_kernel<kVecWidth> : argmax_kernel<1>;
  launch_op(kernel, {.grid = grid, .block = kArgmaxThreads}, seq, state, op_scratch(partials), logits, V, T, max_ctx);
}

extern "C" void op_rms_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x,
                                      const float* ln_weight, const void* wte, int B, int C, int V, int max_ctx,
                                      float eps, int wdtype) {
  const LmHeadArgs a = {.logits = logits,
                        .x = x,
                        .x_stride = C,
                        .wte = wte,
                        .rows = B,
                        .C = C,
                        .V = V,
                        .ln_weight = ln_weight,
                        .eps = eps,
                        .seq = seq,
                        .state = state,
                        .scratch = op_scratch(partials),
                        .max_ctx = max_ctx};
  launch_lm_head<kRmsLmHeadArgmax>(a, wdtype);
}
