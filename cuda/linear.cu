// op_linear: out = inp @ weight + bias with weight in HF Conv1D layout (C, OC).
//   T == 1 (decode): linear_matvec_kernel, memory-bound, streams the weight once with 16-byte loads, split
//                    over C across blocks with a fixed-order merge (cuda/last_block.h).
//   T > 1 (prefill): linear_tiled_kernel, a shared-memory tiled matrix product.
#include "cols.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "warp.h"

// ---- T == 1 ---------------------------------------------------------------------------------------------------
// The weight (C, OC) is cut into blocks of 64 rows (a split of C) x 32 column groups (a tile of OC; a group is
// kWidth columns). In block (tile, split), warp w, lane l reads column group tile * 32 + l of rows
// split * 64 + w + 8 i, i < 8: every load instruction of a warp reads 32 x kWidth consecutive floats of one
// weight row (512 bytes when kWidth = 4), and a thread issues all 8 of its loads before it uses the first.
// The 8 warps' sums meet in shared memory; each block writes its partial (one value per column) to scratch,
// and the last block of a column tile to arrive adds the tile's partials in a fixed order, then the bias.
constexpr int kMatvecThreads = 256;
constexpr int kMatvecWarps = kMatvecThreads / kWarpSize;
constexpr int kMatvecRowsPerThread = 8;                                    // weight loads in flight per thread
constexpr int kMatvecRowsPerSplit = kMatvecWarps * kMatvecRowsPerThread;  // rows of C per block: 64
constexpr int kMatvecTileGroups = kWarpSize;                               // column groups per block
constexpr int kMatvecMergeLanes = kMatvecThreads / kMatvecTileGroups;      // threads adding up one group's partials
constexpr int kMatvecMergeBatch = 8;  // partial loads each merging thread has in flight

// A thread's share of one column group: rows split * 64 + warp + 8 i of column `col`; loads predicated off
// past C or OC read as zeros.
template <int kWidth>
__device__ __forceinline__ Cols<kWidth> matvec_rows(const float* __restrict__ inp, const float* __restrict__ weight,
                                                   int row0, int col, int C, int OC, bool overlapped) {
  Cols<kWidth> acc = {};
#ifndef PLANT_SERIAL_MATVEC
  Cols<kWidth> w[kMatvecRowsPerThread];
  float x[kMatvecRowsPerThread];
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++) {
    const int row = row0 + i * kMatvecWarps;
    w[i] = row < C && col < OC ? load_cols<kWidth>(weight + ((unsigned)row * (unsigned)OC + (unsigned)col)) : Cols<kWidth>{};
  }
  wait_for_predecessor(overlapped);  // inp is the predecessor's output
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++) {
    const int row = row0 + i * kMatvecWarps;
    x[i] = row < C ? __ldcg(inp + row) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMatvecRowsPerThread; i++)
#pragma unroll
    for (int k = 0; k < kWidth; k++) acc.v[k] += x[i] * w[i].v[k];
#else  // planted for test/sass.test.ts: each weight load is used before the next is issued
#pragma unroll 1
  for (int i = 0; i < kMatvecRowsPerThread; i++) {
    const int row = row0 + i * kMatvecWarps;
    if (i == 0) wait_for_predecessor(overlapped);
    if (row >= C || col >= OC) continue;
    const Cols<kWidth> w = load_cols<kWidth>(weight + (size_t)row * OC + col);
    const float x = __ldcg(inp + row);
#pragma unroll
    for (int k = 0; k < kWidth; k++) acc.v[k] += x * w.v[k];
  }
#endif
  return acc;
}

// The last block of a column tile: out[col] = bias[col] + sum over splits of partials[split][col], added as
// 8 interleaved runs (merge lane j takes splits j, j + 8, ...) whose sums meet in shared memory in lane order.
// sums: the block's shared memory, free again after arrive_last's barrier.
template <int kWidth>
__device__ __forceinline__ void matvec_merge(float* __restrict__ out, const float* partials, const float* __restrict__ bias,
                                             Cols<kWidth> (*sums)[kMatvecTileGroups], int splits, int OC) {
  const int group_in_tile = threadIdx.x % kMatvecTileGroups;
  const int lane = threadIdx.x / kMatvecTileGroups;
  const int col = (blockIdx.x * kMatvecTileGroups + group_in_tile) * kWidth;
  Cols<kWidth> sum = {};
  for (int s0 = lane; s0 < splits; s0 += kMatvecMergeLanes * kMatvecMergeBatch) {
    Cols<kWidth> p[kMatvecMergeBatch];
#pragma unroll
    for (int i = 0; i < kMatvecMergeBatch; i++) {
      const int split = s0 + i * kMatvecMergeLanes;
      p[i] = split < splits && col < OC ? load_cols<kWidth>(partials + (size_t)split * OC + col) : Cols<kWidth>{};
    }
#pragma unroll
    for (int i = 0; i < kMatvecMergeBatch; i++) add_cols(sum, p[i]);
  }
  sums[lane][group_in_tile] = sum;
  __syncthreads();
  if (lane != 0 || col >= OC) return;
  Cols<kWidth> total = load_cols<kWidth>(bias + col);
#pragma unroll
  for (int j = 0; j < kMatvecMergeLanes; j++) add_cols(total, sums[j][group_in_tile]);
  store_cols<kWidth>(out + col, total);
}

// out: (OC) = inp (C) @ weight (C, OC) + bias (OC)
// grid: (ceil(OC / (32 kWidth)) tiles, ceil(C / 64) splits)  block: (kMatvecThreads)
// scratch: counters[tile], partials (splits, OC)
template <int kWidth>
__global__ void __launch_bounds__(kMatvecThreads)
    linear_matvec_kernel(float* __restrict__ out, OpScratch scratch, const float* __restrict__ inp,
                         const float* __restrict__ weight, const float* __restrict__ bias, int C, int OC, bool overlapped) {
  __shared__ Cols<kWidth> sums[kMatvecWarps][kMatvecTileGroups];
  __shared__ bool is_last;
  static_assert(kMatvecMergeLanes == kMatvecWarps, "the merge reuses the warps' shared sums");
  let_successor_start();
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int col = (blockIdx.x * kMatvecTileGroups + lane) * kWidth;
  sums[warp][lane] = matvec_rows<kWidth>(inp, weight, blockIdx.y * kMatvecRowsPerSplit + warp, col, C, OC, overlapped);
  __syncthreads();
  if (warp == 0 && col < OC) {  // the block's partial: its 8 warps in order
    Cols<kWidth> partial = sums[0][lane];
#pragma unroll
    for (int w = 1; w < kMatvecWarps; w++) add_cols(partial, sums[w][lane]);
    store_cols<kWidth>(scratch.partials + (size_t)blockIdx.y * OC + col, partial);
  }
  const unsigned splits = gridDim.y;
#ifdef PLANT_BLOCK_ORDER  // planted for test/kernels.emu.test.ts: assumes the highest split finishes last
  __syncthreads();
  if (blockIdx.y != splits - 1) return;
  __threadfence();
#else
  if (!arrive_last(scratch.counters + blockIdx.x, splits, &is_last)) return;
#endif
  matvec_merge<kWidth>(out, scratch.partials, bias, sums, (int)splits, OC);
}

template <int kWidth> static void launch_matvec(float* out, const float* inp, const float* weight, const float* bias, int C, int OC) {
  const int tiles = ceil_div(OC, kMatvecTileGroups * kWidth);
  const int splits = ceil_div(C, kMatvecRowsPerSplit);
  const OpScratch scratch = rt_op_scratch();
  if (!scratch.counters || tiles > kMaxGridCounters || (size_t)splits * OC > scratch.partial_floats) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  LAUNCH(linear_matvec_kernel<kWidth>, dim3(tiles, splits), kMatvecThreads, out, scratch, inp, weight, bias, C, OC,
         rt_overlapped());
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

extern "C" void op_linear(float* out, const float* inp, const float* weight, const float* bias, int T, int C, int OC) {
  if (T > 1) {
    LAUNCH(linear_tiled_kernel, dim3(ceil_div(OC, kTileCols), ceil_div(T, kTileRows)), dim3(kTiledThreadsX, kTiledThreadsY),
           out, inp, weight, bias, T, C, OC);
  } else if (row_vec4_count(OC, out, weight, bias) > 0) {
    launch_matvec<kVecWidth>(out, inp, weight, bias, C, OC);
  } else {
    launch_matvec<1>(out, inp, weight, bias, C, OC);
  }
}
