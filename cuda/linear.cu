// op_linear: out = inp @ weight + bias with weight in HF Conv1D layout (C, OC), stored as wdtype (cuda/dtypes.h).
//   rows <= 8 (decode, B sequences of one row): linear_matvec_kernel, memory-bound, streams the weight once for
//                    all rows with 16-byte loads, split over C across blocks with a fixed-order merge
//                    (cuda/last_block.h); the fused decode ops are the same body with another input and output step.
//   rows > 8 (prefill, the uncached step): linear_tiled_kernel, a shared-memory tiled matrix product.
#include "cols.h"
#include "dtypes.h"
#include "gelu.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "row_stats.h"
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
constexpr int kMatvecTileGroups = 8;                                  // column groups per block: 128 bytes of a row
constexpr int kMatvecSubRows = kWarpSize / kMatvecTileGroups;         // weight rows per warp load instruction: 4
constexpr int kMatvecSlots = kMatvecWarps * kMatvecSubRows;           // threads sharing a column group: 32
constexpr int kMatvecLoads = 8;                                       // weight loads in flight per thread
constexpr int kMatvecRowsPerSplit = kMatvecSlots * kMatvecLoads;      // rows of C per block: 256
constexpr int kMatvecMaxRows = MAX_BATCH;                             // input rows per launch (op_table.h)
constexpr int kMatvecMergeLanes = 4;                                  // lanes adding up one output, then a shuffle tree
constexpr int kMatvecOutputsPerPass = kMatvecThreads / kMatvecMergeLanes;  // 64
constexpr int kMatvecMergeLoads = 8;                                  // partial loads each merging lane has in flight
constexpr int kMatvecStageFloats = kMatvecSlots * kMatvecOutputsPerPass * 4;  // 32 KB: a round of the block's sums
constexpr int kMatvecMaxLayernormC = 4096;
static_assert(kMatvecSlots % kMatvecMergeLanes == 0 && kMatvecThreads % kWarpSize == 0, "whole warps merge");

enum MatvecInput { kInputAsIs, kInputLayernorm };
enum MatvecOutput { kStore, kStoreGelu, kAddTo, kStoreQkv };
enum MatvecOp { kOpLinear, kOpLnQkv, kOpLnLinearGelu, kOpLinearResidual };
__host__ __device__ constexpr MatvecInput input_of(MatvecOp op) { return op == kOpLnQkv || op == kOpLnLinearGelu ? kInputLayernorm : kInputAsIs; }
__host__ __device__ constexpr MatvecOutput output_of(MatvecOp op) {
  return op == kOpLnQkv ? kStoreQkv : op == kOpLnLinearGelu ? kStoreGelu : op == kOpLinearResidual ? kAddTo : kStore;
}

// One matvec's operands, for `rows` input rows (sequences). out: (rows, OC) (kAddTo: out += the product);
// inp: (rows, C) (kInputLayernorm: each row normalised with ln_weight, ln_bias, eps first); kStoreQkv also writes
// the k and v thirds of row b of out to row state[b][STATE_POS] of sequence b's k_cache, v_cache ((max_ctx, C)
// each, C = OC / 3 columns, in kvdtype) when that row is below max_ctx.
struct MatvecArgs {
  float* out;
  OpScratch scratch;
  const float* inp;
  const void* weight;  // (C, OC) in the kernel's storage type
  const float* bias;
  int rows, C, OC;
  const float* ln_weight;
  const float* ln_bias;
  float eps;
  void* k_cache;
  void* v_cache;
  int kvdtype;
  const int* state;
  int max_ctx;
};

// The shapes a kernel instantiation works in: kWidth elements of W per access, kRows accumulated rows.
template <int kWidth, int kRows, MatvecInput kInput> struct MatvecShape {
  static constexpr int kMergeWidth = kWidth < 4 ? kWidth : 4;            // floats per merged output
  static constexpr int kChunks = kWidth / kMergeWidth;                    // merged outputs per row and group
  static constexpr int kRowsPerRound = (kWidth * kRows <= 32 ? kRows : 32 / kWidth);  // rows summed per round
  static constexpr int kUnits = kRowsPerRound * kChunks;                  // a thread's outputs per round
  static constexpr int kOutputs = kRows * kMatvecTileGroups * kChunks;    // a tile's merged outputs per row set
  static constexpr int kMergePasses = (kOutputs + kMatvecOutputsPerPass - 1) / kMatvecOutputsPerPass;
  static constexpr int kMergeBatch = kMatvecMergeLoads / kMergePasses;  // splits per lane and pass in one batch
  static constexpr int kSumFloats = kUnits * kMergeWidth * kMatvecThreads;
  static constexpr int kLayernormFloats = kRows == 1 ? kMatvecMaxLayernormC : 2 * kMatvecMaxLayernormC;
  static constexpr int kStageFloats = kInput == kInputLayernorm && kLayernormFloats > kSumFloats ? kLayernormFloats : kSumFloats;
  // blocks of 256 threads per SM the registers allow: 3 (at most 80 registers) up to 32 accumulators (kRows x kWidth:
  // 8 rows of floats, 4 of halves), else 2 (at most 128 registers)
  static constexpr int kMinBlocksPerSm = kRows * kWidth <= 32 ? 3 : 2;
  static_assert(kStageFloats <= kMatvecStageFloats, "the staging area fits static shared memory");
};

// The block's input rows after the wait for the predecessor: xs[b][j] = input row b's element split * 256 + j
// (zero past C and for rows past a.rows), as is or layer-normed (the rows staged group by group in `stage`, as
// many at a time as fit, for their statistics).
template <int kRows, MatvecInput kInput, int kStageFloats>
__device__ __forceinline__ void matvec_prologue(const MatvecArgs& a, float (*xs)[kMatvecRowsPerSplit], float* stage) {
  const int r = blockIdx.y * kMatvecRowsPerSplit + (int)threadIdx.x;
  const bool in_c = r < a.C;
  if constexpr (kInput == kInputAsIs) {
    float v[kRows];
#pragma unroll
    for (int b = 0; b < kRows; b++) v[b] = in_c && b < a.rows ? __ldcg(a.inp + (size_t)b * a.C + r) : 0.0f;
#pragma unroll
    for (int b = 0; b < kRows; b++) xs[b][threadIdx.x] = v[b];
  } else {
    __shared__ float partial[kRows][kWarpSize];
    const float g = in_c ? __ldcg(a.ln_weight + r) : 0.0f, beta = in_c ? __ldcg(a.ln_bias + r) : 0.0f;
    const int group = kStageFloats / a.C < kRows ? kStageFloats / a.C : kRows;  // rows staged at once (>= 1)
#pragma unroll
    for (int b = 0; b < kRows; b++)
      if (b >= a.rows) xs[b][threadIdx.x] = 0.0f;
    for (int b0 = 0; b0 < a.rows; b0 += group) {
      RowStats st[kRows];
      const int n = a.rows - b0 < group ? a.rows - b0 : group;
      stage_rows_stats<kRows>(st, stage, a.inp + (size_t)b0 * a.C, n, a.C, a.eps, partial);
#pragma unroll
      for (int b = 0; b < kRows; b++)
        if (b < n) xs[b0 + b][threadIdx.x] = in_c ? (stage[b * a.C + r] - st[b].mean) * st[b].rstd * g + beta : 0.0f;
      __syncthreads();  // the next group restages
    }
  }
  __syncthreads();
}

// A thread's products: acc[b] (kWidth columns from col) = sum over its 8 rows of xs[b][row] * weight[row][col],
// the rows in order. Weight loads predicated off past C or OC read as zeros. The weight loads come first, then the
// wait for the predecessor, then the inputs.
template <typename W, int kWidth, int kRows, MatvecInput kInput>
__device__ __forceinline__ void matvec_products(Cols<kWidth> (&acc)[kRows], const MatvecArgs& a, int row0, int slot, int col,
                                                float (*xs)[kMatvecRowsPerSplit], float* stage, bool overlapped) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  const W* weight = static_cast<const W*>(a.weight);
#pragma unroll
  for (int b = 0; b < kRows; b++) acc[b] = Cols<kWidth>{};
#ifndef PLANT_SERIAL_MATVEC
  Packed<W, kWidth> w[kMatvecLoads];
#pragma unroll
  for (int i = 0; i < kMatvecLoads; i++) {
    const int row = row0 + i * kMatvecSlots;
    w[i] = row < a.C && col < a.OC ? load_packed<W, kWidth>(weight + ((unsigned)row * (unsigned)a.OC + (unsigned)col)) : Packed<W, kWidth>{};
  }
  wait_for_predecessor(overlapped);
  matvec_prologue<kRows, kInput, Shape::kStageFloats>(a, xs, stage);
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
  wait_for_predecessor(overlapped);
  matvec_prologue<kRows, kInput, Shape::kStageFloats>(a, xs, stage);
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
__device__ __forceinline__ MergedOutput merged_output(const MatvecArgs& a, int o) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  const int g = o % kMatvecTileGroups, chunk = o / kMatvecTileGroups % Shape::kChunks, b = o / kMatvecTileGroups / Shape::kChunks;
  const int col = (blockIdx.x * kMatvecTileGroups + g) * kWidth + chunk * Shape::kMergeWidth;
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
__device__ __forceinline__ void matvec_block_partial(const MatvecArgs& a, const Cols<kWidth> (&acc)[kRows], float* stage_floats) {
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
      add_cols(sum, stage[unit * kMatvecThreads + (s / kMatvecSubRows) * kWarpSize + (s % kMatvecSubRows) * kMatvecTileGroups + g]);
    }
    merge_lanes(sum);
    const int rr = unit / Shape::kChunks, chunk = unit % Shape::kChunks;
    const int col = (blockIdx.x * kMatvecTileGroups + g) * kWidth + chunk * M;
    if (p == 0 && r0 + rr < a.rows && col < a.OC)
      store_cols<M>(a.scratch.partials + ((size_t)blockIdx.y * a.rows + r0 + rr) * a.OC + col, sum);
  }
}

// The op's output step for row b, the kMergeWidth columns from col: value = bias + the product.
template <int M, MatvecOutput kOutput> __device__ __forceinline__ void matvec_output(const MatvecArgs& a, int b, int col, Cols<M> value) {
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
    const int C = a.OC / 3;
    const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
    if (col < C || pos >= a.max_ctx) return;
    const size_t at = ((size_t)b * a.max_ctx + pos) * C + (col < 2 * C ? col - C : col - 2 * C);  // a chunk never straddles
    store_rounded_as<M>(a.kvdtype, col < 2 * C ? a.k_cache : a.v_cache, at, value.v);
  }
}

// The last block of a column tile: output (b, col) = bias[col] + sum over splits of partials[split][b][col], lane p
// of the output's 4 adding splits p, p + 4, ... in order, then the shuffle tree. All passes' loads go out together.
template <typename W, int kWidth, int kRows, MatvecInput kInput, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_merge(const MatvecArgs& a, int splits) {
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  constexpr int M = Shape::kMergeWidth, P = Shape::kMergePasses, kBatch = Shape::kMergeBatch;
  const int p = threadIdx.x % kMatvecMergeLanes;
  MergedOutput out[P];
#pragma unroll
  for (int pass = 0; pass < P; pass++) out[pass] = merged_output<kWidth, kRows, kInput>(a, pass * kMatvecOutputsPerPass + threadIdx.x / kMatvecMergeLanes);
  Cols<M> sum[P] = {};
  for (int s0 = p; s0 < splits; s0 += kMatvecMergeLanes * kBatch) {
    Cols<M> v[P][kBatch];
#pragma unroll
    for (int pass = 0; pass < P; pass++)
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        const int split = s0 + j * kMatvecMergeLanes;
        v[pass][j] = out[pass].valid && split < splits
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
    if (p != 0 || !out[pass].valid) continue;
    Cols<M> total = load_cols<M>(a.bias + out[pass].col);
    add_cols(total, sum[pass]);
    matvec_output<M, kOutput>(a, out[pass].b, out[pass].col, total);
  }
}

// grid: (ceil(OC / (8 kWidth)) tiles, ceil(C / 256) splits)  block: (kMatvecThreads)
// scratch: counters[tile], partials (splits, rows, OC)
template <typename W, int kWidth, int kRows, MatvecOp kOp> __device__ __forceinline__ void matvec(const MatvecArgs& a, bool overlapped) {
  constexpr MatvecInput kInput = input_of(kOp);
  using Shape = MatvecShape<kWidth, kRows, kInput>;
  __shared__ float xs[kRows][kMatvecRowsPerSplit];           // the block's input rows
  __shared__ float4 stage4[Shape::kStageFloats / kVecWidth];  // staged layer-norm rows, then the slots' sums
  float* stage = reinterpret_cast<float*>(stage4);
  let_successor_start();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slot = warp * kMatvecSubRows + lane / kMatvecTileGroups;
  const int col = (blockIdx.x * kMatvecTileGroups + lane % kMatvecTileGroups) * kWidth;
  Cols<kWidth> acc[kRows];
  matvec_products<W, kWidth, kRows, kInput>(acc, a, blockIdx.y * kMatvecRowsPerSplit + slot, slot, col, xs, stage, overlapped);
  matvec_block_partial<kWidth, kRows, kInput>(a, acc, stage);
  const unsigned splits = gridDim.y;
#ifdef PLANT_BLOCK_ORDER  // planted for test/kernels.emu.test.ts: assumes the highest split finishes last
  __syncthreads();
  if (blockIdx.y != splits - 1) return;
  __threadfence();
#else
  __shared__ bool is_last;
  if (!arrive_last(a.scratch.counters + blockIdx.x, splits, &is_last)) return;
#endif
  matvec_merge<W, kWidth, kRows, kInput, output_of(kOp)>(a, (int)splits);
}

// Each kernel: kWidth elements of W per weight access, kRows rows (sequences) accumulated at once.
#define MATVEC_KERNEL(name, op)                                                                                  \
  template <typename W, int kWidth, int kRows>                                                                   \
  __global__ void __launch_bounds__(kMatvecThreads, MatvecShape<kWidth, kRows, input_of(op)>::kMinBlocksPerSm)   \
      name(MatvecArgs a, bool overlapped) {                                                                      \
    matvec<W, kWidth, kRows, op>(a, overlapped);                                                                 \
  }
// out: (rows, OC) = inp (rows, C) @ weight + bias
MATVEC_KERNEL(linear_matvec_kernel, kOpLinear)
// qkv: (B, 3C) = layernorm(x) @ weight + bias, k and v also to each sequence's cache row pos
MATVEC_KERNEL(ln_qkv_kernel, kOpLnQkv)
// out: (B, OC) = gelu(layernorm(x) @ weight + bias)
MATVEC_KERNEL(ln_linear_gelu_kernel, kOpLnLinearGelu)
// x: (B, OC) += inp @ weight + bias
MATVEC_KERNEL(linear_residual_kernel, kOpLinearResidual)
#undef MATVEC_KERNEL

using MatvecKernel = void (*)(MatvecArgs, bool);

template <MatvecOp kOp, typename W, int kWidth, int kRows> MatvecKernel matvec_kernel() {
  if constexpr (kOp == kOpLinear) return linear_matvec_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpLnQkv) return ln_qkv_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpLnLinearGelu) return ln_linear_gelu_kernel<W, kWidth, kRows>;
  else return linear_residual_kernel<W, kWidth, kRows>;
}

// The instantiation for `rows` rows: 16-byte accesses with 1, 2, 4 or MAX_BATCH accumulated rows (the fewest that hold
// them; the rest predicated off), or the scalar variant (any rows up to 8).
template <MatvecOp kOp, typename W> MatvecKernel pick_matvec(int rows, bool vec) {
  constexpr int V = kVecOf<W>;
  if (!vec) return matvec_kernel<kOp, W, 1, kMatvecMaxRows>();
  switch (batch_bucket(rows)) {
    case 1: return matvec_kernel<kOp, W, V, 1>();
    case 2: return matvec_kernel<kOp, W, V, 2>();
    case 4: return matvec_kernel<kOp, W, V, 4>();
    default: return matvec_kernel<kOp, W, V, kMatvecMaxRows>();
  }
}

// Launches the 16-byte variant when every row of weight, bias and out starts 16-byte aligned (OC a multiple of
// the vector) and the op's own outputs allow it (also_vec), else the scalar one.
template <MatvecOp kOp> static void launch_matvec(const MatvecArgs& a, int wdtype, bool also_vec = true) {
  if (rt_reject_unless(is_storage_type(wdtype) && a.rows >= 1 && a.rows <= kMatvecMaxRows)) return;
  with_storage(wdtype, [&](auto w) {
    using W = decltype(w);
    const bool vec = also_vec && a.OC % kVecOf<W> == 0 && aligned16(a.weight) && row_vec4_count(a.OC, a.out, a.bias) > 0;
    const int width = vec ? kVecOf<W> : 1;
    const dim3 grid(ceil_div(a.OC, kMatvecTileGroups * width), ceil_div(a.C, kMatvecRowsPerSplit));
    if ((int)grid.x > kMaxGridCounters || (a.ln_weight && a.C > kMatvecMaxLayernormC)) {
      rt_fail(cudaErrorInvalidValue);
      return;
    }
    const MatvecKernel kernel = pick_matvec<kOp, W>(a.rows, vec);
    LAUNCH(kernel, grid, kMatvecThreads, a, rt_overlapped());
  });
}

size_t matvec_partials_bytes(int max_rows, int max_in, int max_out) {
  const int rows = max_rows < kMatvecMaxRows ? max_rows : kMatvecMaxRows;
  return (size_t)ceil_div(max_in, kMatvecRowsPerSplit) * rows * max_out * sizeof(float);
}

// ---- T > 1 ----------------------------------------------------------------------------------------------------
constexpr int kTileRows = 32;  // rows of inp/out per block
constexpr int kTileCols = 64;  // output channels per block
constexpr int kTileK = 16;     // reduction slice staged in shared memory per step
constexpr int kTiledThreadsX = 16;
constexpr int kTiledThreadsY = 16;
constexpr int kTiledThreads = kTiledThreadsX * kTiledThreadsY;
constexpr int kRowsPerThread = kTileRows / kTiledThreadsY;
constexpr int kColsPerThread = kTileCols / kTiledThreadsX;
static_assert(kTileRows * kTileK % kTiledThreads == 0 && kTileK * kTileCols % kTiledThreads == 0,
              "tile loads split evenly over the block");

// out: (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC), weight in W (widened as it is staged)
// grid: (ceil(OC / kTileCols), ceil(T / kTileRows))  block: (kTiledThreadsX, kTiledThreadsY)
// Thread (x, y) computes rows y + 16 i and columns x + 16 j of the block's tile (coalesced stores);
// out-of-range tile elements are loaded as zeros.
template <typename W>
__global__ void __launch_bounds__(kTiledThreads)
    linear_tiled_kernel(float* __restrict__ out, const float* __restrict__ inp, const W* __restrict__ weight,
                        const float* __restrict__ bias, int T, int C, int OC) {
  __shared__ float inp_tile[kTileRows][kTileK + 1];  // +1: rows land in different banks
  __shared__ float weight_tile[kTileK][kTileCols];
  const int tid = threadIdx.y * kTiledThreadsX + threadIdx.x;
  const int row0 = blockIdx.y * kTileRows;
  const int col0 = blockIdx.x * kTileCols;
  float acc[kRowsPerThread][kColsPerThread] = {};
  let_successor_start();
  wait_for_predecessor();

  for (int k0 = 0; k0 < C; k0 += kTileK) {
#pragma unroll
    for (int e = tid; e < kTileRows * kTileK; e += kTiledThreads) {
      const int r = row0 + e / kTileK, k = k0 + e % kTileK;
      inp_tile[e / kTileK][e % kTileK] = r < T && k < C ? __ldcg(inp + (size_t)r * C + k) : 0.0f;
    }
#pragma unroll
    for (int e = tid; e < kTileK * kTileCols; e += kTiledThreads) {
      const int k = k0 + e / kTileCols, n = col0 + e % kTileCols;
      weight_tile[e / kTileCols][e % kTileCols] = k < C && n < OC ? widen(load_packed<W, 1>(weight + (size_t)k * OC + n), 0) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileK; k++) {
      float a[kRowsPerThread], w[kColsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; i++) a[i] = inp_tile[threadIdx.y + i * kTiledThreadsY][k];
#pragma unroll
      for (int j = 0; j < kColsPerThread; j++) w[j] = weight_tile[k][threadIdx.x + j * kTiledThreadsX];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; i++)
#pragma unroll
        for (int j = 0; j < kColsPerThread; j++) acc[i][j] += a[i] * w[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; i++) {
    const int r = row0 + threadIdx.y + i * kTiledThreadsY;
#pragma unroll
    for (int j = 0; j < kColsPerThread; j++) {
      const int n = col0 + threadIdx.x + j * kTiledThreadsX;
      if (r < T && n < OC) out[(size_t)r * OC + n] = acc[i][j] + __ldcg(bias + n);
    }
  }
}

extern "C" void op_linear(float* out, float* partials, const float* inp, const void* weight, const float* bias, int rows, int C, int OC,
                          int wdtype) {
  if (rt_reject_unless(is_storage_type(wdtype))) return;
  if (rows > kMatvecMaxRows) {
    with_storage(wdtype, [&](auto w) {
      using W = decltype(w);
      LAUNCH(linear_tiled_kernel<W>, dim3(ceil_div(OC, kTileCols), ceil_div(rows, kTileRows)), dim3(kTiledThreadsX, kTiledThreadsY),
             out, inp, static_cast<const W*>(weight), bias, rows, C, OC);
    });
    return;
  }
  MatvecArgs a = {};
  a.out = out, a.scratch = op_scratch(partials), a.inp = inp, a.weight = weight, a.bias = bias, a.rows = rows, a.C = C, a.OC = OC;
  launch_matvec<kOpLinear>(a, wdtype);
}

extern "C" void op_ln_qkv(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x, const float* ln_weight,
                          const float* ln_bias, const void* weight, const float* bias, const int* state, int B, int C, int max_ctx,
                          float eps, int wdtype, int kvdtype) {
  if (rt_reject_unless(is_storage_type(kvdtype))) return;
  MatvecArgs a = {};
  a.out = qkv, a.scratch = op_scratch(partials), a.inp = x, a.weight = weight, a.bias = bias, a.rows = B, a.C = C, a.OC = 3 * C;
  a.ln_weight = ln_weight, a.ln_bias = ln_bias, a.eps = eps;
  a.k_cache = k_cache, a.v_cache = v_cache, a.kvdtype = kvdtype, a.state = state, a.max_ctx = max_ctx;
  // the vector variant's groups of k and v land in the caches' rows: they must start 16-byte aligned too
  launch_matvec<kOpLnQkv>(a, wdtype, aligned16(k_cache) && aligned16(v_cache));
}

extern "C" void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight, const float* ln_bias,
                                  const void* weight, const float* bias, int B, int C, int OC, float eps, int wdtype) {
  MatvecArgs a = {};
  a.out = out, a.scratch = op_scratch(partials), a.inp = x, a.weight = weight, a.bias = bias, a.rows = B, a.C = C, a.OC = OC;
  a.ln_weight = ln_weight, a.ln_bias = ln_bias, a.eps = eps;
  launch_matvec<kOpLnLinearGelu>(a, wdtype);
}

extern "C" void op_linear_residual(float* x, float* partials, const float* inp, const void* weight, const float* bias, int B, int C,
                                   int OC, int wdtype) {
  MatvecArgs a = {};
  a.out = x, a.scratch = op_scratch(partials), a.inp = inp, a.weight = weight, a.bias = bias, a.rows = B, a.C = C, a.OC = OC;
  launch_matvec<kOpLinearResidual>(a, wdtype);
}
