// op_rope: rotary position embedding of each row's q and k heads in place, one warp per head: the head's elements go
// to registers (and, RMS-normalised first where the model has q/k norms, to shared memory), then every lane turns
// its elements with their rotate-half partners.
#include "dispatch.h"
#include "ops.h"
#include "warp.h"

constexpr int kRopeThreads = 256;
constexpr int kRopeHeadsPerBlock = kRopeThreads / kWarpSize;
constexpr int kRopeMaxHeadSize = 256;
constexpr int kRopeUnits = kRopeMaxHeadSize / kWarpSize;  // elements per lane: lane + 32 j, j < 8

// qkv: (rows, C + 2 kv_C), heads [0, n_head) of q then [0, n_kv_head) of k    rope: (max_ctx, hs) = [cos | sin]
// grid: (ceil((n_head + n_kv_head) / 8), B·T)  block: (kRopeThreads); warp w of block (x, row) takes head 8 x + w.
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(float* __restrict__ qkv, const int* __restrict__ state, const float* __restrict__ rope,
                const float* __restrict__ q_norm, const float* __restrict__ k_norm, int T, int C, int n_head,
                int n_kv_head, int max_ctx, float eps) {
  __shared__ float heads[kRopeHeadsPerBlock][kRopeMaxHeadSize];
  let_successor_start();
  wait_for_predecessor();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int head = blockIdx.x * kRopeHeadsPerBlock + warp, row = blockIdx.y;
  const int hs = C / n_head, half = hs / 2;
  const int pos = __ldcg(state + (row / T) * STATE_INTS + STATE_POS) + row % T;
  if (head >= n_head + n_kv_head || pos >= max_ctx) return;
  const bool is_q = head < n_head;
  float* x = qkv + (size_t)row * (C + 2 * (size_t)(n_kv_head * hs)) + (size_t)head * hs;
  const float* norm = is_q ? q_norm : k_norm;
  const float* cos_sin = rope + (size_t)pos * hs;
  float v[kRopeUnits], cs[kRopeUnits], sn[kRopeUnits], w[kRopeUnits];
#pragma unroll
  for (int j = 0; j < kRopeUnits; j++) {
    const int e = lane + j * kWarpSize, i = e < half ? e : e - half;
    const bool in = e < hs;
    v[j] = in ? __ldcg(x + e) : 0.0f;
    cs[j] = in ? __ldcg(cos_sin + i) : 0.0f;
    sn[j] = in ? __ldcg(cos_sin + half + i) : 0.0f;
    w[j] = in && norm ? __ldcg(norm + e) : 1.0f;
  }
  float scale = 1.0f;
  if (norm) {
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < kRopeUnits; j++) squares += v[j] * v[j];
    scale = 1.0f / sqrtf(warp_sum(squares) / hs + eps);
  }
  float* h = heads[warp];
#pragma unroll
  for (int j = 0; j < kRopeUnits; j++) {
    v[j] = norm ? v[j] * scale * w[j] : v[j];
    if (lane + j * kWarpSize < hs) h[lane + j * kWarpSize] = v[j];
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kRopeUnits; j++) {
    const int e = lane + j * kWarpSize;
    if (e >= hs) continue;
    x[e] = e < half ? v[j] * cs[j] - h[e + half] * sn[j] : v[j] * cs[j] + h[e - half] * sn[j];
  }
}

extern "C" void op_rope(float* qkv, const int* state, const float* rope, const float* q_norm, const float* k_norm,
                        int B, int T, int C, int n_head, int n_kv_head, int max_ctx, float eps) {
  const bool shape_fits = n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && C % n_head == 0 &&
                          C / n_head % 2 == 0 && C / n_head <= kRopeMaxHeadSize;
  if (rt_reject_unless(shape_fits && B >= 1 && T >= 1 && (q_norm == nullptr) == (k_norm == nullptr))) return;
  const dim3 grid(ceil_div(n_head + n_kv_head, kRopeHeadsPerBlock), B * T);
  launch_op(rope_kernel, {.grid = grid, .block = kRopeThreads}, qkv, state, rope, q_norm, k_norm, T, C, n_head,
            n_kv_head, max_ctx, eps);
}
