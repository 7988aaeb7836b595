// op_gelu, op_residual, op_swiglu: flat elementwise kernels, one float4 (or, for the tail, one float) per thread.
#include "cols.h"
#include "gelu.h"
#include "silu.h"
#include "dispatch.h"
#include "ops.h"

constexpr int kElementwiseThreads = 256;

// Threads [0, n_vec4) take float4 i; thread n_vec4 + k takes float 4 * n_vec4 + k of the tail.
__device__ __forceinline__ int tail_index(int i, int n_vec4) { return n_vec4 * kVecWidth + (i - n_vec4); }
inline int elementwise_threads(int N, int n_vec4) { return n_vec4 + (N - n_vec4 * kVecWidth); }

// out, inp: (N)    grid: (ceil(threads / kElementwiseThreads))  block: (kElementwiseThreads)
__global__ void __launch_bounds__(kElementwiseThreads)
    gelu_kernel(float* __restrict__ out, const float* __restrict__ inp, int N, int n_vec4) {
  let_successor_start();
  wait_for_predecessor();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_vec4) {
    const float4 x = __ldcg(reinterpret_cast<const float4*>(inp) + i);
    reinterpret_cast<float4*>(out)[i] = make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w));
  } else if (tail_index(i, n_vec4) < N) {
    out[tail_index(i, n_vec4)] = gelu(__ldcg(inp + tail_index(i, n_vec4)));
  }
}

// out, a, b: (N), out may alias a or b (hence no __restrict__)
// grid: (ceil(threads / kElementwiseThreads))  block: (kElementwiseThreads)
__global__ void __launch_bounds__(kElementwiseThreads)
    residual_kernel(float* out, const float* a, const float* b, int N, int n_vec4) {
  let_successor_start();
  wait_for_predecessor();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_vec4) {
    const float4 x = reinterpret_cast<const float4*>(a)[i];
    const float4 y = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else if (tail_index(i, n_vec4) < N) {
    out[tail_index(i, n_vec4)] = a[tail_index(i, n_vec4)] + b[tail_index(i, n_vec4)];
  }
}

// out: (rows, I) = silu(gate) * up    gate_up: (rows, 2I) as [gate | up]
// grid: (ceil(rows · I / kWidth / kElementwiseThreads))  block: (kElementwiseThreads); thread i takes kWidth
// outputs (a float4, or one float when I % 4 != 0), its gate and up loads issued together.
template <int kWidth>
__global__ void __launch_bounds__(kElementwiseThreads)
    swiglu_kernel(float* __restrict__ out, const float* __restrict__ gate_up, int rows, int I) {
  let_successor_start();
  wait_for_predecessor();
  const int units = I / kWidth;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * units) return;
  const int r = i / units, c = i % units * kWidth;
  const float* gate = gate_up + (size_t)r * 2 * I + c;
  const Cols<kWidth> g = load_cols<kWidth>(gate), u = load_cols<kWidth>(gate + I);
  Cols<kWidth> y;
#pragma unroll
  for (int k = 0; k < kWidth; k++) y.v[k] = silu(g.v[k]) * u.v[k];
  store_cols<kWidth>(out + (size_t)r * I + c, y);
}

extern "C" void op_gelu(float* out, const float* inp, int N) {
  const int n_vec4 = vec4_count(N, out, inp);
  const Geometry at = {.grid = ceil_div(elementwise_threads(N, n_vec4), kElementwiseThreads),
                       .block = kElementwiseThreads};
  launch_op(gelu_kernel, at, out, inp, N, n_vec4);
}

extern "C" void op_residual(float* out, const float* a, const float* b, int N) {
  const int n_vec4 = vec4_count(N, out, a, b);
  const Geometry at = {.grid = ceil_div(elementwise_threads(N, n_vec4), kElementwiseThreads),
                       .block = kElementwiseThreads};
  launch_op(residual_kernel, at, out, a, b, N, n_vec4);
}

extern "C" void op_swiglu(float* out, const float* gate_up, int rows, int I) {
  if (rt_reject_unless(rows >= 1 && I >= 1)) return;
  const bool vec = row_vec4_count(I, out, gate_up) > 0;
  const int width = vec ? kVecWidth : 1;
  const Geometry at = {.grid = ceil_div(rows * (I / width), kElementwiseThreads), .block = kElementwiseThreads};
  launch_op(vec ? swiglu_kernel<kVecWidth> : swiglu_kernel<1>, at, out, gate_up, rows, I);
}
