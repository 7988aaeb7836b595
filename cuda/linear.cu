// op_linear: out = inp @ weight + bias with weight in HF Conv1D layout (C, OC).
//   T == 1 (decode): linear_matvec_kernel, memory-bound, streams the weight once with 16-byte loads.
//   T > 1 (prefill): linear_tiled_kernel, a shared-memory tiled matrix product.
#include "launch.h"
#include "ops.h"
#include "warp.h"

// ---- T == 1 ---------------------------------------------------------------------------------------------------
constexpr int kMatvecThreads = 256;
constexpr int kMatvecMaxColLanes = 8;  // column groups per block: 8 float4 = one 128-byte line per weight row
constexpr int kMatvecUnroll = 4;       // weight loads in flight per thread

// kWidth consecutive floats, loaded/stored as one access (a float4 when kWidth == 4).
template <int kWidth> struct Cols { float v[kWidth]; };
template <int kWidth> __device__ __forceinline__ Cols<kWidth> load_cols(const float* p);
template <> __device__ __forceinline__ Cols<1> load_cols<1>(const float* p) { return {{__ldg(p)}}; }
template <> __device__ __forceinline__ Cols<4> load_cols<4>(const float* p) {
  const float4 f = __ldg(reinterpret_cast<const float4*>(p));
  return {{f.x, f.y, f.z, f.w}};
}
template <int kWidth> __device__ __forceinline__ void store_cols(float* p, const Cols<kWidth>& c);
template <> __device__ __forceinline__ void store_cols<1>(float* p, const Cols<1>& c) { *p = c.v[0]; }
template <> __device__ __forceinline__ void store_cols<4>(float* p, const Cols<4>& c) {
  *reinterpret_cast<float4*>(p) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
}

// Sums each of acc's kWidth values over the warp's lanes that share lane % col_lanes (col_lanes <= 32 / kWidth).
// The first log2(kWidth) steps halve the values each lane carries (a lane keeps one half and trades the
// other with its partner), so a float4 takes 2 + 1 + log2(8 / col_lanes) shuffles instead of 4 per step.
// Afterwards lane l holds value index l / (32 / kWidth) of the sum; lanes with l % (32 / kWidth) < col_lanes
// hold the totals.
template <int kWidth> __device__ __forceinline__ float reduce_row_lanes(Cols<kWidth> acc, int col_lanes) {
  const int lane = threadIdx.x % kWarpSize;
  int offset = kWarpSize / 2;
#pragma unroll
  for (int half = kWidth / 2; half >= 1; half /= 2, offset /= 2) {
    const bool upper = lane & offset;
#pragma unroll
    for (int i = 0; i < half; i++) {
      const float send = upper ? acc.v[i] : acc.v[i + half];
      const float keep = upper ? acc.v[i + half] : acc.v[i];
      acc.v[i] = keep + __shfl_xor_sync(kFullWarpMask, send, offset);
    }
  }
  float v = acc.v[0];
  for (; offset >= col_lanes; offset /= 2) v += __shfl_xor_sync(kFullWarpMask, v, offset);
  return v;
}

// out: (OC) = inp (C) @ weight (C, OC) + bias (OC)
// grid: (ceil(OC / kWidth / col_lanes))  block: (kMatvecThreads), col_lanes = a power of two <= 8.
// Thread tid owns column group g = blockIdx.x * col_lanes + tid % col_lanes (kWidth columns) and sums rows
// tid / col_lanes + k * rows_per_pass; a warp reads 32 / col_lanes rows x col_lanes groups per step.
// The row partials are summed by warp shuffles (reduce_row_lanes), then across warps in shared memory.
template <int kWidth>
__global__ void __launch_bounds__(kMatvecThreads)
    linear_matvec_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ weight,
                         const float* __restrict__ bias, int C, int OC, int col_lanes) {
  static_assert(kMatvecMaxColLanes <= kWarpSize / kWidth, "reduce_row_lanes needs its halving steps above col_lanes");
  constexpr int kLanesPerValue = kWarpSize / kWidth;
  __shared__ Cols<kWidth> warp_partial[kMatvecThreads / kWarpSize][kMatvecMaxColLanes];
  const int col_lane = threadIdx.x % col_lanes;
  const int rows_per_pass = kMatvecThreads / col_lanes;
  const int col = (blockIdx.x * col_lanes + col_lane) * kWidth;  // first of this thread's kWidth columns
  const bool active = col < OC;

  Cols<kWidth> acc = {};
  if (active) {
#pragma unroll kMatvecUnroll
    for (int c = threadIdx.x / col_lanes; c < C; c += rows_per_pass) {
      const float x = __ldg(inp + c);
      const Cols<kWidth> w = load_cols<kWidth>(weight + (size_t)c * OC + col);
#pragma unroll
      for (int k = 0; k < kWidth; k++) acc.v[k] += x * w.v[k];
    }
  }
  const float total = reduce_row_lanes<kWidth>(acc, col_lanes);
  const int lane = threadIdx.x % kWarpSize;
  if (lane % kLanesPerValue < col_lanes) warp_partial[threadIdx.x / kWarpSize][col_lane].v[lane / kLanesPerValue] = total;
  __syncthreads();
  if ((int)threadIdx.x >= col_lanes || !active) return;
  Cols<kWidth> sum = load_cols<kWidth>(bias + col);
  for (int w = 0; w < kMatvecThreads / kWarpSize; w++)
#pragma unroll
    for (int k = 0; k < kWidth; k++) sum.v[k] += warp_partial[w][col_lane].v[k];
  store_cols<kWidth>(out + col, sum);
}

// Column lanes per block: the widest (best coalescing) that still gives every SM a block.
static int matvec_col_lanes(int col_groups) {
  const int sms = rt_sm_count();
  for (int lanes = kMatvecMaxColLanes; lanes > 1; lanes /= 2)
    if (ceil_div(col_groups, lanes) >= sms) return lanes;
  return 1;
}

template <int kWidth> static void launch_matvec(float* out, const float* inp, const float* weight, const float* bias, int C, int OC) {
  const int col_groups = OC / kWidth;
  const int col_lanes = matvec_col_lanes(col_groups);
  LAUNCH(linear_matvec_kernel<kWidth>, ceil_div(col_groups, col_lanes), kMatvecThreads, out, inp, weight, bias, C, OC,
         col_lanes);
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

  for (int k0 = 0; k0 < C; k0 += kTileK) {
#pragma unroll
    for (int e = tid; e < kTileRows * kTileK; e += kTiledThreads) {
      const int r = row0 + e / kTileK, k = k0 + e % kTileK;
      inp_tile[e / kTileK][e % kTileK] = r < T && k < C ? inp[(size_t)r * C + k] : 0.0f;
    }
#pragma unroll
    for (int e = tid; e < kTileK * kTileCols; e += kTiledThreads) {
      const int k = k0 + e / kTileCols, n = col0 + e % kTileCols;
      weight_tile[e / kTileCols][e % kTileCols] = k < C && n < OC ? __ldg(weight + (size_t)k * OC + n) : 0.0f;
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
      if (r < T && n < OC) out[(size_t)r * OC + n] = acc[i][j] + __ldg(bias + n);
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
