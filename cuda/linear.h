// The decode matvec (rows <= 8) as device code: the body of op_linear's decode kernel and of the fused decode ops
// (cuda/linear.cu launches them one kernel per op; cuda/persistent.cu runs them as tasks of the persistent step).
#pragma once

#include "cols.h"
#include "dtypes.h"
#include "gelu.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "row_stats.h"
#include "silu.h"
#include "warp.h"

// ---- rows <= 8 (decode): op_linear and the fused decode ops ---------------------------------------------------
// The weight (C, OC), in its storage type W, is cut into blocks of 256 rows (a split of C) x 8 column groups (a
// tile of OC; a group is one 16-byte access: kWidth = 4 floats or 8 halves, or one element in the scalar
// variant). In block (tile, split), thread (warp w, lane l) takes column group tile * 8 + l % 8 of rows
// split * 256 + 32 i + slot, i < 8, slot = 4 w + l / 8: each load instruction of a warp reads 128 contiguous
// bytes of each of 4 rows, and a thread issues all 8 of its loads before it uses the first (and, launched to
// overlap its predecessor, before it waits for it). Every weight load feeds all kRows input rows: a thread keeps
// kRows accumulators of its group, so the weight is read once for the whole batch. The block's input rows
// (its 256 elements of each, layer-normed first by the fused ops) sit in shared memory. The 32 threads (slots)
// of a group meet in shared memory, 4 lanes per output each adding 8 slots and then a fixed shuffle tree; each
// block writes its partial (one value per row and column) to scratch, and the last block of a column tile to
// arrive adds the tile's partials in the same fixed way, then the bias, and applies the op's output step.
// Every sum is taken in an order that does not depend on the batch, so each row gets the bits it gets alone.
constexpr int kMatvecThreads = 256;
constexpr int kMatvecWarps = kMatvecThreads / kWarpSize;
constexpr int kMatvecTileGroups = 8;                              // column groups per block: 128 bytes of a row
constexpr int kMatvecSubRows = kWarpSize / kMatvecTileGroups;     // weight rows per warp load instruction: 4
constexpr int kMatvecSlots = kMatvecWarps * kMatvecSubRows;       // threads sharing a column group: 32
constexpr int kMatvecLoads = 8;                                   // weight loads in flight per thread
constexpr int kMatvecRowsPerSplit = kMatvecSlots * kMatvecLoads;  // rows of C per block: 256
constexpr int kMatvecMaxRows = MAX_BATCH;                         // input rows per launch (op_table.h)
constexpr int kMatvecMergeLanes = 4;                              // lanes adding up one output, then a shuffle tree
constexpr int kMatvecOutputsPerPass = kMatvecThreads / kMatvecMergeLanes;  // 64
constexpr int kMatvecMergeLoads = 8;  // partial loads each merging lane has in flight
constexpr int kMatvecStageFloats = kMatvecSlots * kMatvecOutputsPerPass * 4;  // 32 KB: a round of the block's sums
constexpr int kMatvecMaxLayernormC = 4096;
// Dependent L2 round trips besides the weight stream (the kernel model's chain): the inputs arrive under the
// weights; then the merge: the partial stored and fenced, the arrival counter, the partials read back.
constexpr int kMatvecChainL2Trips = 3;
static_assert(kMatvecSlots % kMatvecMergeLanes == 0 && kMatvecThreads % kWarpSize == 0, "whole warps merge");

enum MatvecInput { kInputAsIs, kInputLayernorm, kInputRmsnorm };
enum MatvecOutput { kStore, kStoreGelu, kAddTo, kStoreQkv, kStoreQkvRope, kStoreSwiglu };
enum MatvecOp { kOpLinear, kOpLnQkv, kOpLnLinearGelu, kOpLinearResidual, kOpRmsQkvRope, kOpRmsGateUp };
__host__ __device__ constexpr MatvecInput input_of(MatvecOp op) {
  return op == kOpLnQkv || op == kOpLnLinearGelu     ? kInputLayernorm
         : op == kOpRmsQkvRope || op == kOpRmsGateUp ? kInputRmsnorm
                                                     : kInputAsIs;
}
__host__ __device__ constexpr MatvecOutput output_of(MatvecOp op) {
  return op == kOpLnQkv            ? kStoreQkv
         : op == kOpLnLinearGelu   ? kStoreGelu
         : op == kOpLinearResidual ? kAddTo
         : op == kOpRmsQkvRope     ? kStoreQkvRope
         : op == kOpRmsGateUp      ? kStoreSwiglu
                                   : kStore;
}
// Outputs whose step needs two columns half a unit apart: RoPE's rotate-half pairs (i, i + hs/2) of each q and k
// head (units of hs over the q and k columns; v's columns as they are), SwiGLU's gate j and up j (one unit of all
// 2I columns). Their tiles are paired: groups g and g + 4 of a tile hold partners, so the merge's lanes 16 apart
// meet them with one shuffle; a warp's weight load reads two 64-byte halves of 4 rows instead of 128 bytes.
__host__ __device__ constexpr bool pairs_columns(MatvecOutput out) {
  return out == kStoreQkvRope || out == kStoreSwiglu;
}
constexpr int kMatvecPartnerLanes = kMatvecMergeLanes * kMatvecTileGroups / 2;  // 16: output o's partner is o ^ 4

// One matvec's operands, for `rows` input rows (sequences). out: (rows, OC) (kAddTo: out += the product);
// inp: (rows, C) (kInputLayernorm: each row normalised with ln_weight, ln_bias, eps first; kInputRmsnorm: RMS-
// normalised with ln_weight, eps). kStoreQkv and kStoreQkvRope: out's row is [q (q_cols) | k (kv) | v (kv)],
// kv = (OC - q_cols) / 2. kStoreQkv also writes row b's k and v to row state[b][STATE_POS] = pos of sequence b's
// k_cache, v_cache ((max_ctx, kv) each, in kvdtype) when that row is below max_ctx. kStoreQkvRope: heads of
// head_dim; q and k turned by position pos's rotation (rope: (max_ctx, head_dim) cos | sin) when pos is below
// max_ctx (each head RMS-normalised with q_norm / k_norm first where they are given), then k and v to the caches'
// row pos ((max_ctx, kv) each). kStoreSwiglu: the product's row is [gate (I) | up (I)], OC = 2I, and out: (rows, I) =
// silu(gate) * up.
struct MatvecArgs {
  float* out;
  OpScratch scratch;
  const float* inp;
  const void* weight;  // (C, OC) in the kernel's storage type
  const float* bias;
  const float* ln_weight;
  const float* ln_bias;
  void* k_cache;
  void* v_cache;
  const int* state;
  const float* rope;
  int rows, C, OC;
  float eps;
  int kvdtype;
  int max_ctx;
  int q_cols, head_dim;
  const float* q_norm;  // kStoreQkvRope: (head_dim) each, RMS-normalising every q and k head first (Qwen3); or null
  const float* k_norm;
};

// The paired columns of an output that pairs them: units of `unit` columns, each [first half | second half], over
// columns [0, paired); the columns from `paired` on (v) are not paired.
struct ColumnPairs {
  int unit, paired;
};
template <MatvecOutput kOutput> __host__ __device__ __forceinline__ ColumnPairs column_pairs(const MatvecArgs& a) {
  if constexpr (kOutput == kStoreQkvRope)
    return {a.head_dim, a.q_cols + (a.OC - a.q_cols) / 2};
  else
    return {a.OC, a.OC};
}

// The column of weight, bias and product that a tile's column v stands for: v itself, or where kOutput pairs
// columns, tile t of a unit takes the unit's columns [t 4 kWidth, (t + 1) 4 kWidth) of each half, first half first.
template <int kWidth, MatvecOutput kOutput> __device__ __forceinline__ int true_column(const MatvecArgs& a, int v) {
  if constexpr (!pairs_columns(kOutput)) {
    return v;
  } else {
    constexpr int kTile = kMatvecTileGroups * kWidth, kHalf = kTile / 2;
    const ColumnPairs pairs = column_pairs<kOutput>(a);
    if (v >= pairs.paired) return v;
    const int unit = v / pairs.unit, in_unit = v % pairs.unit, tile = in_unit / kTile, in_tile = in_unit % kTile;
    return unit * pairs.unit + (in_tile < kHalf ? 0 : pairs.unit / 2) + tile * kHalf + in_tile % kHalf;
  }
}
// Whether tile column v is in the first half of its tile (the first half of its unit where columns are paired).
template <int kWidth> __device__ __forceinline__ bool in_first_half(int v) {
  return v % (kMatvecTileGroups * kWidth) < kMatvecTileGroups * kWidth / 2;
}

// The shapes a kernel instantiation works in: kWidth elements of W per access, kRows accumulated rows.
template <int kWidth, int kRows, MatvecInput kInput> struct MatvecShape {
  static constexpr int kMergeWidth = kWidth < 4 ? kWidth : 4;  // floats per merged output
  static constexpr int kChunks = kWidth / kMergeWidth;         // merged outputs per row and group
  static constexpr int kRowsPerRound = (kWidth * kRows <= 32 ? kRows : 32 / kWidth);  // rows summed per round
  static constexpr int kUnits = kRowsPerRound * kChunks;                              // a thread's outputs per round
  static constexpr int kOutputs = kRows * kMatvecTileGroups * kChunks;  // a tile's merged outputs per row set
  static constexpr int kMergePasses = (kOutputs + kMatvecOutputsPerPass - 1) / kMatvecOutputsPerPass;
  static constexpr int kMergeBatch = kMatvecMergeLoads / kMergePasses;  // splits per lane and pass in one batch
  static constexpr int kSumFloats = kUnits * kMergeWidth * kMatvecThreads;
  static constexpr int kLayernormFloats = kRows == 1 ? kMatvecMaxLayernormC : 2 * kMatvecMaxLayernormC;
  static constexpr int kStageFloats =
      kInput != kInputAsIs && kLayernormFloats > kSumFloats ? kLayernormFloats : kSumFloats;
  // blocks of 256 threads per SM the registers allow: 3 (at most 80 registers) up to 32 accumulators (kRows x kWidth:
  // 8 rows of floats, 4 of halves), else 2 (at most 128 registers)
  static constexpr int kMinBlocksPerSm = kRows * kWidth <= 32 ? 3 : 2;
  static_assert(kStageFloats <= kMatvecStageFloats, "the staging area fits static shared memory");
};

// The block's input rows after the wait for the predecessor: xs[b][j] = input row b's element split * 256 + j
// (zero past C and for rows past a.rows), as is or layer-normed (the rows staged group by group in `stage`, as
// many at a time as fit, for their statistics).
template <int kRows, MatvecInput kInput, int kStageFloats>
__device__ __forceinline__ void matvec_prologue(const MatvecArgs& a, const BlockPlace& at,
                                                float (*xs)[kMatvecRowsPerSplit], float* stage) {
  const int r = at.idx.y * kMatvecRowsPerSplit + (int)threadIdx.x;
  const bool in_c = r < a.C;
  if constexpr (kInput == kInputAsIs) {
    float v[kRows];
#pragma unroll
    for (int b = 0; b < kRows; b++) v[b] = in_c && b < a.rows ? __ldcg(a.inp + (size_t)b * a.C + r) : 0.0f;
#pragma unroll
    for (int b = 0; b < kRows; b++) xs[b][threadIdx.x] = v[b];
  } else {
    constexpr bool kRms = kInput == kInputRmsnorm;
    __shared__ float partial[kRows][kWarpSize];
    const float g = in_c ? __ldcg(a.ln_weight + r) : 0.0f;
    const float beta = in_c && !kRms ? __ldcg(a.ln_bias + r) : 0.0f;
    const int group = kStageFloats / a.C < kRows ? kStageFloats / a.C : kRows;  // rows staged at once (>= 1)
#pragma unroll
    for (int b = 0; b < kRows; b++)
      if (b >= a.rows) xs[b][threadIdx.x] = 0.0f;
    for (int b0 = 0; b0 < a.rows; b0 += group) {
      RowStats st[kRows];
      const int n = a.rows - b0 < group ? a.rows - b0 : group;
      stage_rows_stats<kRows, kRms>(st, stage, a.inp + (size_t)b0 * a.C, n, a.C, a.eps, partial);
#pragma unroll
      for (int b = 0; b < kRows; b++) {
        if (b >= n) continue;
        const float x = stage[b * a.C + r];  // RMSNorm as op_rmsnorm: x · rstd · weight
        xs[b0 + b][threadIdx.x] = !in_c ? 0.0f : kRms ? x * st[b].rstd * g : (x - st[b].mean) * st[b].rstd * g + beta;
      }
      __syncthreads();  // the next group restages
    }
  }
  __syncthreads();
}

// A thread's products: acc[b] (kWidth columns from col) = sum over its 8 rows of xs[b][row] * weight[row][col],
// the rows in order. Weight loads predicated off past C or OC read as zeros. The weight loads come first, then the
// wait for the predecessor, then the inputs.
template <typename W, int kWidth, int kRows, MatvecInput kInput>
__device__ __forceinline__ void matvec_products(Cols<kWidth> (&acc)[kRows], const MatvecArgs& a, int row0, int slot,
                                                int col, float (*xs)[kMatvecRowsPerSplit], float* stage,
                                                const BlockPlace& at) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  const W* weight = static_cast<const W*>(a.weight);
#pragma unroll
  for (int b = 0; b < kRows; b++) acc[b] = Cols<kWidth>{};
#ifndef PLANT_SERIAL_MATVEC
  Packed<W, kWidth> w[kMatvecLoads];
#pragma unroll
  for (int i = 0; i < kMatvecLoads; i++) {
    const int row = row0 + i * kMatvecSlots;
    w[i] = row < a.C && col < a.OC ? load_packed<W, kWidth>(weight + ((unsigned)row * (unsigned)a.OC + (unsigned)col))
                                   : Packed<W, kWidth>{};
  }
  wait_for_inputs(at);
  matvec_prologue<kRows, kInput, Shape::kStageFloats>(a, at, xs, stage);
#pragma unroll
  for (int i = 0; i < kMatvecLoads; i++) {
    float x[kRows];
#pragma unroll
    for (int b = 0; b < kRows; b++) x[b] = xs[b][i * kMatvecSlots + slot];
#pragma unroll
    for (int k = 0; k < kWidth; k++) {
      const float wk = widen(w[i], k);
#pragma unroll
      for (int b = 0; b < kRows; b++) acc[b].v[k] += x[b] * wk;
    }
  }
#else  // planted for test/sass.test.ts: each weight load is used before the next is issued
  wait_for_inputs(at);
  matvec_prologue<kRows, kInput, Shape::kStageFloats>(a, at, xs, stage);
#pragma unroll 1
  for (int i = 0; i < kMatvecLoads; i++) {
    const int row = row0 + i * kMatvecSlots;
    if (row >= a.C || col >= a.OC) continue;
    const Packed<W, kWidth> w = load_packed<W, kWidth>(weight + ((unsigned)row * (unsigned)a.OC + (unsigned)col));
#pragma unroll
    for (int k = 0; k < kWidth; k++)
#pragma unroll
      for (int b = 0; b < kRows; b++) acc[b].v[k] += xs[b][i * kMatvecSlots + slot] * widen(w, k);
  }
#endif
}

// One merged output: kMergeWidth floats of row b from column col.
struct MergedOutput {
  int b, col;
  bool valid;
};

// Output o of a tile (o < kOutputs): row, group and chunk, g fastest; rows past a.rows or columns past OC invalid.
template <int kWidth, int kRows, MatvecInput kInput>
__device__ __forceinline__ MergedOutput merged_output(const MatvecArgs& a, const BlockPlace& at, int o) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  const int g = o % kMatvecTileGroups, chunk = o / kMatvecTileGroups % Shape::kChunks,
            b = o / kMatvecTileGroups / Shape::kChunks;
  const int col = (at.idx.x * kMatvecTileGroups + g) * kWidth + chunk * Shape::kMergeWidth;
  return {b, col, o < Shape::kOutputs && b < a.rows && col < a.OC};
}

// The sum of 4 consecutive lanes' values, the same bits in each: (l0 + l1) + (l2 + l3).
template <int n> __device__ __forceinline__ void merge_lanes(Cols<n>& v) {
#pragma unroll
  for (int offset = 1; offset < kMatvecMergeLanes; offset *= 2)
#pragma unroll
    for (int k = 0; k < n; k++) v.v[k] += __shfl_xor_sync(kFullWarpMask, v.v[k], offset);
}

// The block's partial: for each row b and column of the tile, the sum over the 32 slots' acc, written to
// partials[split][b][col]. Round by round (as many rows as fit the staging area): every thread stages its
// accumulators, then output o is added up by lanes 4o..4o+3 (lane p: slots p, p + 4, ...), and lane 4o stores it.
template <int kWidth, int kRows, MatvecInput kInput>
__device__ __forceinline__ void matvec_block_partial(const MatvecArgs& a, const BlockPlace& at,
                                                     const Cols<kWidth> (&acc)[kRows], float* stage_floats) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  constexpr int M = Shape::kMergeWidth;
  Cols<M>* stage = reinterpret_cast<Cols<M>*>(stage_floats);  // [unit][thread]
  const int p = threadIdx.x % kMatvecMergeLanes, o_in_round = threadIdx.x / kMatvecMergeLanes;
#pragma unroll
  for (int r0 = 0; r0 < kRows; r0 += Shape::kRowsPerRound) {
    if (r0 > 0) __syncthreads();  // the previous round's sums are read
#pragma unroll
    for (int rr = 0; rr < Shape::kRowsPerRound; rr++)
#pragma unroll
      for (int c = 0; c < Shape::kChunks; c++) {
        Cols<M> v;
#pragma unroll
        for (int k = 0; k < M; k++) v.v[k] = acc[r0 + rr].v[c * M + k];
        stage[(rr * Shape::kChunks + c) * kMatvecThreads + threadIdx.x] = v;
      }
    __syncthreads();
    if (o_in_round >= Shape::kUnits * kMatvecTileGroups) continue;  // whole warps
    const int g = o_in_round % kMatvecTileGroups, unit = o_in_round / kMatvecTileGroups;
    Cols<M> sum = {};
#pragma unroll
    for (int k = 0; k < kMatvecSlots / kMatvecMergeLanes; k++) {
      const int s = p + k * kMatvecMergeLanes;  // slot s is thread (warp s / 4, lane (s % 4) * 8 + g)
      add_cols(sum, stage[unit * kMatvecThreads + (s / kMatvecSubRows) * kWarpSize +
                          (s % kMatvecSubRows) * kMatvecTileGroups + g]);
    }
    merge_lanes(sum);
    const int rr = unit / Shape::kChunks, chunk = unit % Shape::kChunks;
    const int col = (at.idx.x * kMatvecTileGroups + g) * kWidth + chunk * M;
    if (p == 0 && r0 + rr < a.rows && col < a.OC)
      store_cols<M>(a.scratch.partials + ((size_t)at.idx.y * a.rows + r0 + rr) * a.OC + col, sum);
  }
}

// The op's output step for row b, the kMergeWidth columns from col: value = bias + the product.
template <int M, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_output(const MatvecArgs& a, int b, int col, Cols<M> value) {
  float* out = a.out + (size_t)b * a.OC + col;
  if constexpr (kOutput == kStoreGelu) {
#pragma unroll
    for (int k = 0; k < M; k++) value.v[k] = gelu(value.v[k]);
  }
  if constexpr (kOutput == kAddTo) {
    Cols<M> sum = load_cols<M>(out);
    add_cols(sum, value);
    value = sum;
  }
  store_cols<M>(out, value);
  if constexpr (kOutput == kStoreQkv) {
    const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
    if (col < a.q_cols || pos >= a.max_ctx) return;
    const int kv = (a.OC - a.q_cols) / 2;
    const bool is_k = col < a.q_cols + kv;  // a chunk never straddles k and v
    const size_t at = ((size_t)b * a.max_ctx + pos) * kv + (col - (is_k ? a.q_cols : a.q_cols + kv));
    store_rounded_as<M>(a.kvdtype, is_k ? a.k_cache : a.v_cache, at, value.v);
  }
}

// The output step of a paired output for row b, the kMergeWidth columns from col (value = bias + the product), its
// partner the columns half a unit away (first: whether col is in the unit's first half).
//   kStoreQkvRope: q and k turned as op_rope turns them, x' = x cos - y sin (first half), y' = y cos + x sin, at the
//                  row's position (below max_ctx; else as they are), then k and v to the caches' row pos.
//   kStoreSwiglu:  the gate half stores silu(gate) · up to out's row (I columns).
template <int M, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_paired_output(const MatvecArgs& a, int b, int col, Cols<M> value,
                                                     const Cols<M>& partner, bool first) {
  if constexpr (kOutput == kStoreSwiglu) {
    if (!first) return;
    const int I = a.OC / 2;
#pragma unroll
    for (int k = 0; k < M; k++) value.v[k] = silu(value.v[k]) * partner.v[k];
    store_cols<M>(a.out + (size_t)b * I + col, value);
  } else {
    const ColumnPairs pairs = column_pairs<kOutput>(a);
    const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
    if (col < pairs.paired && pos < a.max_ctx) {
      const int half = a.head_dim / 2, i = col % a.head_dim - (first ? 0 : half);
      const float* cos_sin = a.rope + (size_t)pos * a.head_dim + i;
      const Cols<M> cs = load_cols<M>(cos_sin), sn = load_cols<M>(cos_sin + half);
#pragma unroll
      for (int k = 0; k < M; k++)
        value.v[k] =
            first ? value.v[k] * cs.v[k] - partner.v[k] * sn.v[k] : value.v[k] * cs.v[k] + partner.v[k] * sn.v[k];
    }
    store_cols<M>(a.out + (size_t)b * a.OC + col, value);
    if (col < a.q_cols || pos >= a.max_ctx) return;
    const int kv = pairs.paired - a.q_cols;
    const bool is_k = col < pairs.paired;
    const size_t at = ((size_t)b * a.max_ctx + pos) * kv + (col - (is_k ? a.q_cols : pairs.paired));
    store_rounded_as<M>(a.kvdtype, is_k ? a.k_cache : a.v_cache, at, value.v);
  }
}

// The last block of a column tile: output (b, col) = bias[col] + sum over splits of partials[split][b][col], lane p
// of the output's 4 adding splits p, p + 4, ... in order, then the shuffle tree. All passes' loads go out together.
// A paired output meets its partner (lanes kMatvecPartnerLanes apart) before its output step.
template <typename W, int kWidth, int kRows, MatvecInput kInput, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_merge(const MatvecArgs& a, const BlockPlace& at, int splits) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  constexpr int M = Shape::kMergeWidth, P = Shape::kMergePasses, kBatch = Shape::kMergeBatch;
  const int p = threadIdx.x % kMatvecMergeLanes;
  MergedOutput out[P];
#pragma unroll
  for (int pass = 0; pass < P; pass++)
    out[pass] =
        merged_output<kWidth, kRows, kInput>(a, at, pass * kMatvecOutputsPerPass + threadIdx.x / kMatvecMergeLanes);
  Cols<M> sum[P] = {};
  for (int s0 = p; s0 < splits; s0 += kMatvecMergeLanes * kBatch) {
    Cols<M> v[P][kBatch];
#pragma unroll
    for (int pass = 0; pass < P; pass++)
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        const int split = s0 + j * kMatvecMergeLanes;
        v[pass][j] =
            out[pass].valid && split < splits
                ? load_cols<M>(a.scratch.partials + ((size_t)split * a.rows + out[pass].b) * a.OC + out[pass].col)
                : Cols<M>{};
      }
#pragma unroll
    for (int pass = 0; pass < P; pass++)
#pragma unroll
      for (int j = 0; j < kBatch; j++) add_cols(sum[pass], v[pass][j]);
  }
#pragma unroll
  for (int pass = 0; pass < P; pass++) {
    merge_lanes(sum[pass]);
    if constexpr (pairs_columns(kOutput)) {
      const int col = true_column<kWidth, kOutput>(a, out[pass].col);
      Cols<M> total = {}, partner;
      if (out[pass].valid) {
        total = load_cols<M>(a.bias + col);
        add_cols(total, sum[pass]);
      }
#pragma unroll
      for (int k = 0; k < M; k++) partner.v[k] = __shfl_xor_sync(kFullWarpMask, total.v[k], kMatvecPartnerLanes);
      if (p != 0 || !out[pass].valid) continue;
      if (kOutput == kStoreQkvRope && a.q_norm && col < column_pairs<kOutput>(a).paired)
        store_cols<M>(a.out + (size_t)out[pass].b * a.OC + col, total);  // turned with its head (matvec_head_norm)
      else
        matvec_paired_output<M, kOutput>(a, out[pass].b, col, total, partner, in_first_half<kWidth>(out[pass].col));
    } else {
      if (p != 0 || !out[pass].valid) continue;
      Cols<M> total = load_cols<M>(a.bias + out[pass].col);
      add_cols(total, sum[pass]);
      matvec_output<M, kOutput>(a, out[pass].b, out[pass].col, total);
    }
  }
}

constexpr int kMatvecMaxHeadDim = 256;                           // q/k norms: the widest head a warp normalises
constexpr int kMatvecHeadUnits = kMatvecMaxHeadDim / kWarpSize;  // elements per lane: lane + 32 j, j < 8
static_assert(kMatvecMaxRows <= kMatvecWarps, "one warp per row normalises a head");
// Dependent L2 round trips the head adds to the merge's (the kernel model's chain): the tile's q/k columns stored and
// fenced, the head's arrival counter, the head read back.
constexpr int kMatvecHeadNormL2Trips = 3;

// kStoreQkvRope with q/k norms (Qwen3): a head's RMS needs all of its columns, which several column tiles hold. The
// merged tiles leave their q and k columns as they are; the last of a head's tiles to merge then takes the whole
// head, row b in warp b, as op_rope does: RMS-normalised with q_norm / k_norm, turned at the row's position (below
// max_ctx; else as it is), and a k head to the cache's row pos. `heads`: (kMatvecWarps, kMatvecMaxHeadDim) of shared
// memory; a head's arrival counter follows the launch's column tiles'.
template <int kWidth>
__device__ __forceinline__ void matvec_head_norm(const MatvecArgs& a, const BlockPlace& at, float* heads) {
  constexpr int kTile = kMatvecTileGroups * kWidth;
  const int paired = column_pairs<kStoreQkvRope>(a).paired, first_column = at.idx.x * kTile;
  if (first_column >= paired) return;          // a tile of v
  const int head = first_column / a.head_dim;  // a tile never straddles heads (launch_matvec checks)
  __shared__ bool is_last;
  if (!arrive_last(a.scratch.counters + at.grid.x + head, a.head_dim / kTile, &is_last)) return;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, b = warp;
  if (b >= a.rows) return;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  if (pos >= a.max_ctx) return;
  const int hs = a.head_dim, half = hs / 2, column = head * hs;
  const bool is_q = column < a.q_cols;
  float* x = a.out + (size_t)b * a.OC + column;
  const float* norm = is_q ? a.q_norm : a.k_norm;
  const float* cos_sin = a.rope + (size_t)pos * hs;
  // the head through shared memory, so that only its elements stay in registers (the persistent step's bodies
  // share its register budget): normalised, then each element turned with its partner half a head away
  float v[kMatvecHeadUnits];
#pragma unroll
  for (int j = 0; j < kMatvecHeadUnits; j++) v[j] = lane + j * kWarpSize < hs ? __ldcg(x + lane + j * kWarpSize) : 0.0f;
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kMatvecHeadUnits; j++) squares += v[j] * v[j];
  const float scale = 1.0f / sqrtf(warp_sum(squares) / hs + a.eps);
  float* h = heads + warp * kMatvecMaxHeadDim;
#pragma unroll
  for (int j = 0; j < kMatvecHeadUnits; j++) {
    const int e = lane + j * kWarpSize;
    if (e < hs) h[e] = v[j] * scale * __ldcg(norm + e);
  }
  __syncwarp();
  const int kv = paired - a.q_cols;
  const size_t cache_row = ((size_t)b * a.max_ctx + pos) * kv + (column - a.q_cols);
#pragma unroll
  for (int j = 0; j < kMatvecHeadUnits; j++) {
    const int e = lane + j * kWarpSize;
    if (e >= hs) continue;
    const int i = e < half ? e : e - half;
    const float cs = __ldcg(cos_sin + i), sn = __ldcg(cos_sin + half + i);
    const float turned[1] = {e < half ? h[e] * cs - h[e + half] * sn : h[e] * cs + h[e - half] * sn};
    x[e] = turned[0];
    if (!is_q) store_rounded_as<1>(a.kvdtype, a.k_cache, cache_row + e, turned);
  }
}

// The persistent step's look-ahead for virtual block `at` (cuda/persistent.cu): its rows of C, the bytes of its
// column tile in each (128, fewer in the last tile; a paired tile's two halves of 64).
template <typename W, int kWidth, MatvecOutput kOutput = kStore>
__device__ __forceinline__ L2Lines matvec_lines(const MatvecArgs& a, const BlockPlace& at) {
  constexpr int kTile = kMatvecTileGroups * kWidth;
  const int row = at.idx.y * kMatvecRowsPerSplit, col = at.idx.x * kTile;
  if (row >= a.C || col >= a.OC) return {};
  const W* weight_row = static_cast<const W*>(a.weight) + (size_t)row * a.OC;
  const size_t stride = (size_t)a.OC * sizeof(W);
  const int rows = min(kMatvecRowsPerSplit, a.C - row);
  if constexpr (pairs_columns(kOutput)) {  // every tile is whole (the launcher checks)
    const char* first = reinterpret_cast<const char*>(weight_row + true_column<kWidth, kOutput>(a, col));
    const char* second = reinterpret_cast<const char*>(weight_row + true_column<kWidth, kOutput>(a, col + kTile / 2));
    return {first, second, stride, rows, (int)(kTile / 2 * sizeof(W))};
  } else {
    return {reinterpret_cast<const char*>(weight_row + col), nullptr, stride, rows,
            (int)(min(kTile, a.OC - col) * sizeof(W))};
  }
}

// The block's shared memory: its input rows, and the staging area (layer-norm rows, then the slots' sums).
template <int kWidth, int kRows, MatvecInput kInput> struct MatvecShared {
  float xs[kRows][kMatvecRowsPerSplit];
  float4 stage4[MatvecShape<kWidth, kRows, kInput>::kStageFloats / kVecWidth];
};

// grid: (ceil(OC / (8 kWidth)) tiles, ceil(C / 256) splits)  block: (kMatvecThreads)
// scratch: counters[tile], partials (splits, rows, OC)
template <typename W, int kWidth, int kRows, MatvecOp kOp>
__device__ __forceinline__ void matvec(const MatvecArgs& a, const BlockPlace& at,
                                       MatvecShared<kWidth, kRows, input_of(kOp)>& shared) {
  constexpr MatvecInput kInput = input_of(kOp);
  float* stage = reinterpret_cast<float*>(shared.stage4);
  let_successor_start();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slot = warp * kMatvecSubRows + lane / kMatvecTileGroups;
  const int col =
      true_column<kWidth, output_of(kOp)>(a, (at.idx.x * kMatvecTileGroups + lane % kMatvecTileGroups) * kWidth);
  Cols<kWidth> acc[kRows];
  matvec_products<W, kWidth, kRows, kInput>(acc, a, at.idx.y * kMatvecRowsPerSplit + slot, slot, col, shared.xs, stage,
                                            at);
  matvec_block_partial<kWidth, kRows, kInput>(a, at, acc, stage);
  const unsigned splits = at.grid.y;
#ifdef PLANT_BLOCK_ORDER  // planted for test/kernels.emu.test.ts: assumes the highest split finishes last
  __syncthreads();
  if (at.idx.y != splits - 1) return;
  __threadfence();
#else
  __shared__ bool is_last;
  if (!arrive_last(a.scratch.counters + at.idx.x, splits, &is_last)) return;
#endif
  matvec_merge<W, kWidth, kRows, kInput, output_of(kOp)>(a, at, (int)splits);
  if constexpr (output_of(kOp) == kStoreQkvRope) {
    static_assert(MatvecShape<kWidth, kRows, kInput>::kStageFloats >= kMatvecWarps * kMatvecMaxHeadDim,
                  "a head per warp fits the staging area");
    if (a.q_norm) matvec_head_norm<kWidth>(a, at, stage);  // the merge reads no staged sums
  }
}
