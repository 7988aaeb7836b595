// op_linear: out = inp @ weight + bias with weight in HF Conv1D layout (C, OC).
//   T == 1 (decode): linear_matvec_kernel, memory-bound, streams the weight once with 16-byte loads, split
//                    over C across blocks with a fixed-order merge (cuda/last_block.h).
//   T > 1 (prefill): linear_tiled_kernel, a shared-memory tiled matrix product.
#include "cols.h"
#include "gelu.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "row_stats.h"
#include "warp.h"

// ---- T == 1: op_linear and the fused decode ops -------------------------------------------------------------
// The weight (C, OC) is cut into blocks of 64 rows (a split of C) x 32 column groups (a tile of OC; a group is
// kWidth columns). In block (tile, split), warp w, lane l reads column group tile * 32 + l of rows
// split * 64 + w + 8 i, i < 8: every load instruction of a warp reads 32 x kWidth consecutive floats of one
// weight row (512 bytes when kWidth = 4), and a thread issues all 8 of its loads before it uses the first
// (and, launched to overlap its predecessor, before it waits for it). The 8 warps' sums meet in shared
// memory; each block writes its partial (one value per column) to scratch, and the last block of a column
// tile to arrive adds the tile's partials in a fixed order, then the bias, and applies the op's output step.
// The fused ops differ only in their input step (the input row as is, or layer-normed in a prologue) and
// their output step; each has its own kernel (named for its op) around one body.
constexpr int kMatvecThreads = 256;
constexpr int kMatvecWarps = kMatvecThreads / kWarpSize;
constexpr int kMatvecRowsPerThread = 8;                                    // weight loads in flight per thread
constexpr int kMatvecRowsPerSplit = kMatvecWarps * kMatvecRowsPerThread;  // rows of C per block: 64
constexpr int kMatvecTileGroups = kWarpSize;                               // column groups per block
constexpr int kMatvecMergeLanes = kMatvecThreads / kMatvecTileGroups;      // threads adding up one group's partials
constexpr int kMatvecMergeBatch = 8;  // partial loads each merging thread has in flight
constexpr int kMatvecMaxLayernormC = 4096;  // the layer-normed input row is staged in 16 KB of shared memory

enum MatvecInput { kInputAsIs, kInputLayernorm };
enum MatvecOutput { kStore, kStoreGelu, kAddTo, kStoreQkv };

// One matvec's operands. out: (OC) (kAddTo: out += the product); inp: (C) (kInputLayernorm: normalised with
// ln_weight, ln_bias, eps first); kStoreQkv also writes the k and v thirds of out to row state[STATE_POS] of
// k_cache, v_cache (C = OC / 3 columns each) when that row is below max_ctx.
struct MatvecArgs {
  float* out;
  OpScratch scratch;
  const float* inp;
  const float* weight;
  const float* bias;
  int C, OC;
  const float* ln_weight;
  const float* ln_bias;
  float eps;
  float* k_cache;
  float* v_cache;
  const int* state;
  int max_ctx;
};

// The block's input step, after the wait for the predecessor: with a layer norm, the block stages the whole
// input row (its statistics need it) and normalises its own 64 rows into `normed` (shared memory).
template <MatvecInput kInput> __device__ __forceinline__ void matvec_prologue(const MatvecArgs& a, float* normed) {
  if constexpr (kInput == kInputLayernorm) {
    __shared__ float row_shared[kMatvecMaxLayernormC];
    __shared__ float partial[kWarpSize];
    // this block's rows of the layer norm's weight and bias, loaded before the statistics need the row
    const int r = blockIdx.y * kMatvecRowsPerSplit + (int)threadIdx.x;
    const bool mine = threadIdx.x < kMatvecRowsPerSplit && r < a.C;
    const float g = mine ? __ldcg(a.ln_weight + r) : 0.0f, b = mine ? __ldcg(a.ln_bias + r) : 0.0f;
    const RowStats st = stage_row_stats(row_shared, a.inp, a.C, a.eps, partial);
    if (mine) normed[threadIdx.x] = (row_shared[r] - st.mean) * st.rstd * g + b;
    __syncthreads();
  }
}

// The input value of weight row `row` (zero past C): inp as is, or its layer-normed value from the prologue.
template <MatvecInput kInput> __device__ __forceinline__ float matvec_input(const MatvecArgs& a, const float* normed, int row) {
  if (row >= a.C) return 0.0f;
  if constexpr (kInput == kInputAsIs) return __ldcg(a.inp + row);
  return normed[row - blockIdx.y * kMatvecRowsPerSplit];
}

// A thread's share of one column group: rows row0 + 8 i of column `col`; loads predicated off past C or OC
// read as zeros. The weight loads come first, then the wait for the predecessor, then the inputs.
template <int kWidth, MatvecInput kInput>
__device__ __forceinline__ Cols<kWidth> matvec_rows(const MatvecArgs& a, int row0, int col, bool overlapped) {
  __shared__ float normed[kMatvecRowsPerSplit];
  Cols<kWidth> acc = {};
#ifndef PLANT_SERIAL_MATVEC
  Cols<kWidth> w[kMatvecRowsPerThread];
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++) {
    const int row = row0 + i * kMatvecWarps;
    w[i] = row < a.C && col < a.OC ? load_cols<kWidth>(a.weight + ((unsigned)row * (unsigned)a.OC + (unsigned)col)) : Cols<kWidth>{};
  }
  wait_for_predecessor(overlapped);
  matvec_prologue<kInput>(a, normed);
  float x[kMatvecRowsPerThread];
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++) x[i] = matvec_input<kInput>(a, normed, row0 + i * kMatvecWarps);
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++)
#pragma unroll
    for (int k = 0; k < kWidth; k++) acc.v[k] += x[i] * w[i].v[k];
#else  // planted for test/sass.test.ts: each weight load is used before the next is issued
  wait_for_predecessor(overlapped);
  matvec_prologue<kInput>(a, normed);
#pragma unroll 1
  for (int i = 0; i < kMatvecRowsPerThread; i++) {
    const int row = row0 + i * kMatvecWarps;
    if (row >= a.C || col >= a.OC) continue;
    const Cols<kWidth> w = load_cols<kWidth>(a.weight + ((unsigned)row * (unsigned)a.OC + (unsigned)col));
    const float x = matvec_input<kInput>(a, normed, row);
#pragma unroll
    for (int k = 0; k < kWidth; k++) acc.v[k] += x * w.v[k];
  }
#endif
  return acc;
}

// The op's output step for the kWidth columns from col: value = bias + the product.
template <int kWidth, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_output(const MatvecArgs& a, int col, Cols<kWidth> value) {
  if constexpr (kOutput == kStoreGelu) {
#pragma unroll
    for (int k = 0; k < kWidth; k++) value.v[k] = gelu(value.v[k]);
  }
  if constexpr (kOutput == kAddTo) {
    Cols<kWidth> sum = load_cols<kWidth>(a.out + col);
    add_cols(sum, value);
    value = sum;
  }
  store_cols<kWidth>(a.out + col, value);
  if constexpr (kOutput == kStoreQkv) {
    const int C = a.OC / 3;
    const int pos = __ldcg(a.state + STATE_POS);
    if (col < C || pos >= a.max_ctx) return;
    float* cache = col < 2 * C ? a.k_cache + (col - C) : a.v_cache + (col - 2 * C);  // a group never straddles
    store_cols<kWidth>(cache + (size_t)pos * C, value);
  }
}

// The last block of a column tile: bias[col] + sum over splits of partials[split][col], added as 8
// interleaved runs (merge lane j takes splits j, j + 8, ...) whose sums meet in shared memory in lane order.
// sums: the block's shared memory, free again after arrive_last's barrier.
template <int kWidth, MatvecOutput kOutput>
__device__ __forceinline__ void matvec_merge(const MatvecArgs& a, Cols<kWidth> (*sums)[kMatvecTileGroups], int splits) {
  const int group_in_tile = threadIdx.x % kMatvecTileGroups;
  const int lane = threadIdx.x / kMatvecTileGroups;
  const int col = (blockIdx.x * kMatvecTileGroups + group_in_tile) * kWidth;
  Cols<kWidth> sum = {};
  for (int s0 = lane; s0 < splits; s0 += kMatvecMergeLanes * kMatvecMergeBatch) {
    Cols<kWidth> p[kMatvecMergeBatch];
#pragma unroll
    for (int i = 0; i < kMatvecMergeBatch; i++) {
      const int split = s0 + i * kMatvecMergeLanes;
      p[i] = split < splits && col < a.OC ? load_cols<kWidth>(a.scratch.partials + (size_t)split * a.OC + col) : Cols<kWidth>{};
    }
#pragma unroll
    for (int i = 0; i < kMatvecMergeBatch; i++) add_cols(sum, p[i]);
  }
  sums[lane][group_in_tile] = sum;
  __syncthreads();
  if (lane != 0 || col >= a.OC) return;
  Cols<kWidth> total = load_cols<kWidth>(a.bias + col);
#pragma unroll
  for (int j = 0; j < kMatvecMergeLanes; j++) add_cols(total, sums[j][group_in_tile]);
  matvec_output<kWidth, kOutput>(a, col, total);
}

// grid: (ceil(OC / (32 kWidth)) tiles, ceil(C / 64) splits)  block: (kMatvecThreads)
// scratch: counters[tile], partials (splits, OC)
template <int kWidth, MatvecInput kInput, MatvecOutput kOutput>
__device__ __forceinline__ void matvec(const MatvecArgs& a, bool overlapped) {
  __shared__ Cols<kWidth> sums[kMatvecWarps][kMatvecTileGroups];
  static_assert(kMatvecMergeLanes == kMatvecWarps, "the merge reuses the warps' shared sums");
  let_successor_start();
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int col = (blockIdx.x * kMatvecTileGroups + lane) * kWidth;
  sums[warp][lane] = matvec_rows<kWidth, kInput>(a, blockIdx.y * kMatvecRowsPerSplit + warp, col, overlapped);
  __syncthreads();
  if (warp == 0 && col < a.OC) {  // the block's partial: its 8 warps in order
    Cols<kWidth> partial = sums[0][lane];
#pragma unroll
    for (int w = 1; w < kMatvecWarps; w++) add_cols(partial, sums[w][lane]);
    store_cols<kWidth>(a.scratch.partials + (size_t)blockIdx.y * a.OC + col, partial);
  }
  const unsigned splits = gridDim.y;
#ifdef PLANT_BLOCK_ORDER  // planted for test/kernels.emu.test.ts: assumes the highest split finishes last
  __syncthreads();
  if (blockIdx.y != splits - 1) return;
  __threadfence();
#else
  __shared__ bool is_last;
  if (!arrive_last(a.scratch.counters + blockIdx.x, splits, &is_last)) return;
#endif
  matvec_merge<kWidth, kOutput>(a, sums, (int)splits);
}

// out: (OC) = inp (C) @ weight (C, OC) + bias (OC)
template <int kWidth> __global__ void __launch_bounds__(kMatvecThreads) linear_matvec_kernel(MatvecArgs a, bool overlapped) {
  matvec<kWidth, kInputAsIs, kStore>(a, overlapped);
}
// qkv: (3C) = layernorm(x) @ weight + bias, k and v also to the caches' row pos
template <int kWidth> __global__ void __launch_bounds__(kMatvecThreads) ln_qkv_kernel(MatvecArgs a, bool overlapped) {
  matvec<kWidth, kInputLayernorm, kStoreQkv>(a, overlapped);
}
// out: (OC) = gelu(layernorm(x) @ weight + bias)
template <int kWidth> __global__ void __launch_bounds__(kMatvecThreads) ln_linear_gelu_kernel(MatvecArgs a, bool overlapped) {
  matvec<kWidth, kInputLayernorm, kStoreGelu>(a, overlapped);
}
// x: (OC) += inp @ weight + bias
template <int kWidth> __global__ void __launch_bounds__(kMatvecThreads) linear_residual_kernel(MatvecArgs a, bool overlapped) {
  matvec<kWidth, kInputAsIs, kAddTo>(a, overlapped);
}

using MatvecKernel = void (*)(MatvecArgs, bool);

// Launches vec4 when every row of weight, bias and out starts 16-byte aligned (OC % 4 == 0) and the op's own
// outputs allow it (also_vec4), else scalar.
static void launch_matvec(MatvecKernel vec4, MatvecKernel scalar, const MatvecArgs& a, bool also_vec4 = true) {
  const bool vec = also_vec4 && row_vec4_count(a.OC, a.out, a.weight, a.bias) > 0;
  const int width = vec ? kVecWidth : 1;
  const dim3 grid(ceil_div(a.OC, kMatvecTileGroups * width), ceil_div(a.C, kMatvecRowsPerSplit));
  if ((int)grid.x > kMaxGridCounters || (a.ln_weight && a.C > kMatvecMaxLayernormC)) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  const MatvecKernel kernel = vec ? vec4 : scalar;
  LAUNCH(kernel, grid, kMatvecThreads, a, rt_overlapped());
}

size_t matvec_partials_bytes(int max_in, int max_out) {
  return (size_t)ceil_div(max_in, kMatvecRowsPerSplit) * max_out * sizeof(float);
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

// out: (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC)
// grid: (ceil(OC / kTileCols), ceil(T / kTileRows))  block: (kTiledThreadsX, kTiledThreadsY)
// Thread (x, y) computes rows y + 16 i and columns x + 16 j of the block's tile (coalesced stores);
// out-of-range tile elements are loaded as zeros.
__global__ void __launch_bounds__(kTiledThreads)
    linear_tiled_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ weight,
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
      weight_tile[e / kTileCols][e % kTileCols] = k < C && n < OC ? __ldcg(weight + (size_t)k * OC + n) : 0.0f;
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

extern "C" void op_linear(float* out, float* partials, const float* inp, const void* weight_any, const float* bias, int T, int C, int OC,
                          int wdtype) {
  if (rt_reject_unless(wdtype == DTYPE_F32)) return;
  const float* weight = static_cast<const float*>(weight_any);
  if (T > 1) {
    LAUNCH(linear_tiled_kernel, dim3(ceil_div(OC, kTileCols), ceil_div(T, kTileRows)), dim3(kTiledThreadsX, kTiledThreadsY),
           out, inp, weight, bias, T, C, OC);
    return;
  }
  MatvecArgs a = {};
  a.out = out, a.scratch = op_scratch(partials), a.inp = inp, a.weight = weight, a.bias = bias, a.C = C, a.OC = OC;
  launch_matvec(linear_matvec_kernel<kVecWidth>, linear_matvec_kernel<1>, a);
}

extern "C" void op_ln_qkv(float* qkv, void* k_any, void* v_any, float* partials, const float* x, const float* ln_weight,
                          const float* ln_bias, const void* weight, const float* bias, const int* state, int B, int C, int max_ctx,
                          float eps, int wdtype, int kvdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32 && kvdtype == DTYPE_F32)) return;
  float* k_cache = static_cast<float*>(k_any);
  float* v_cache = static_cast<float*>(v_any);
  MatvecArgs a = {};
  a.out = qkv, a.scratch = op_scratch(partials), a.inp = x, a.weight = static_cast<const float*>(weight), a.bias = bias, a.C = C, a.OC = 3 * C;
  a.ln_weight = ln_weight, a.ln_bias = ln_bias, a.eps = eps;
  a.k_cache = k_cache, a.v_cache = v_cache, a.state = state, a.max_ctx = max_ctx;
  // float4 groups of k and v land in the caches' rows: they must start 16-byte aligned too
  launch_matvec(ln_qkv_kernel<kVecWidth>, ln_qkv_kernel<1>, a, aligned16(k_cache) && aligned16(v_cache));
}

extern "C" void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight, const float* ln_bias,
                                  const void* weight, const float* bias, int B, int C, int OC, float eps, int wdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32)) return;
  MatvecArgs a = {};
  a.out = out, a.scratch = op_scratch(partials), a.inp = x, a.weight = static_cast<const float*>(weight), a.bias = bias, a.C = C, a.OC = OC;
  a.ln_weight = ln_weight, a.ln_bias = ln_bias, a.eps = eps;
  launch_matvec(ln_linear_gelu_kernel<kVecWidth>, ln_linear_gelu_kernel<1>, a);
}

extern "C" void op_linear_residual(float* x, float* partials, const float* inp, const void* weight, const float* bias, int B, int C,
                                   int OC, int wdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32)) return;
  MatvecArgs a = {};
  a.out = x, a.scratch = op_scratch(partials), a.inp = inp, a.weight = static_cast<const float*>(weight), a.bias = bias, a.C = C, a.OC = OC;
  launch_matvec(linear_residual_kernel<kVecWidth>, linear_residual_kernel<1>, a);
}
