// op_linear: out = inp @ weight + bias with weight in HF Conv1D layout (C, OC), stored as wdtype (cuda/dtypes.h).
//   rows <= 8 (decode, B sequences of one row): linear_matvec_kernel, memory-bound, streams the weight once for
//                    all rows with 16-byte loads, split over C across blocks with a fixed-order merge
//                    (cuda/last_block.h); the fused decode ops are the same body with another input and output step.
//   rows > 8 (prefill, the uncached step): linear_tiled_kernel, a shared-memory tiled matrix product.
#include "dispatch.h"
#include "linear.h"

// Each kernel: kWidth elements of W per weight access, kRows rows (sequences) accumulated at once.
#define MATVEC_KERNEL(name, op)                                                                                \
  template <typename W, int kWidth, int kRows>                                                                 \
  __global__ void __launch_bounds__(kMatvecThreads, MatvecShape<kWidth, kRows, input_of(op)>::kMinBlocksPerSm) \
      name(MatvecArgs a, Overlap overlap) {                                                                    \
    __shared__ MatvecShared<kWidth, kRows, input_of(op)> shared;                                               \
    matvec<W, kWidth, kRows, op>(a, own_launch(overlap), shared);                                              \
  }
// out: (rows, OC) = inp (rows, C) @ weight + bias
MATVEC_KERNEL(linear_matvec_kernel, kOpLinear)
// qkv: (B, C + 2 kv_C) = layernorm(x) @ weight + bias, k and v also to each sequence's cache row pos
MATVEC_KERNEL(ln_qkv_kernel, kOpLnQkv)
// out: (B, OC) = gelu(layernorm(x) @ weight + bias)
MATVEC_KERNEL(ln_linear_gelu_kernel, kOpLnLinearGelu)
// x: (B, OC) += inp @ weight + bias
MATVEC_KERNEL(linear_residual_kernel, kOpLinearResidual)
// qkv: (B, Q + 2 KV) = rmsnorm(x) @ weight + bias, q and k turned at pos, k and v also to the caches' row pos
MATVEC_KERNEL(rms_qkv_rope_kernel, kOpRmsQkvRope)
// out: (B, I) = silu(gate) * up, [gate | up] = rmsnorm(x) @ weight + bias
MATVEC_KERNEL(rms_gate_up_kernel, kOpRmsGateUp)
#undef MATVEC_KERNEL

using MatvecKernel = void (*)(MatvecArgs, Overlap);

template <MatvecOp kOp, typename W, int kWidth, int kRows> MatvecKernel matvec_kernel() {
  if constexpr (kOp == kOpLinear)
    return linear_matvec_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpLnQkv)
    return ln_qkv_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpLnLinearGelu)
    return ln_linear_gelu_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpLinearResidual)
    return linear_residual_kernel<W, kWidth, kRows>;
  else if constexpr (kOp == kOpRmsQkvRope)
    return rms_qkv_rope_kernel<W, kWidth, kRows>;
  else
    return rms_gate_up_kernel<W, kWidth, kRows>;
}

// The instantiation for `rows` rows: 16-byte accesses with 1, 2, 4 or MAX_BATCH accumulated rows (the fewest that hold
// them; the rest predicated off), or the scalar variant (any rows up to 8).
template <MatvecOp kOp, typename W> MatvecKernel pick_matvec(int rows, bool vec) {
  constexpr int V = kVecOf<W>;
  if (!vec) return matvec_kernel<kOp, W, 1, kMatvecMaxRows>();
  return with_batch_bucket(rows, [](auto bucket) { return matvec_kernel<kOp, W, V, decltype(bucket)::value>(); });
}

// The persistent step's task form of a fused decode op (a plain linear has none).
template <MatvecOp kOp> static StepTaskForm matvec_task(const MatvecArgs& a, bool vec, int wdtype) {
  static_assert(kOp != kOpLinear, "a plain linear has no task form");
  const StepTaskKind kind = kOp == kOpLnQkv            ? kTaskLnQkv
                            : kOp == kOpLnLinearGelu   ? kTaskLnLinearGelu
                            : kOp == kOpLinearResidual ? kTaskLinearResidual
                            : kOp == kOpRmsQkvRope     ? kTaskRmsQkvRope
                                                       : kTaskRmsGateUp;
  const int kvdtype = kOp == kOpLnQkv || kOp == kOpRmsQkvRope ? a.kvdtype : kStepNone;
  return {.kind = kind,
          .vec = vec,
          .variant = {.wdtype = wdtype, .kvdtype = kvdtype, .rows = batch_bucket(a.rows), .arch = step_arch_of(kind)}};
}

// Launches the 16-byte variant when every row of weight, bias and out starts 16-byte aligned (OC a multiple of
// the vector), the op's own outputs allow it (also_vec) and, where the op pairs columns, its tiles fit the units
// whole; else the scalar one (whose tiles of 8 columns a unit must hold whole).
template <MatvecOp kOp> static void launch_matvec(const MatvecArgs& a, int wdtype, bool also_vec = true) {
  constexpr bool kPaired = pairs_columns(output_of(kOp));
  const int unit = kPaired ? column_pairs<output_of(kOp)>(a).unit : 0;  // 0: any tile fits
  if (rt_reject_unless(is_storage_type(wdtype) && a.rows >= 1 && a.rows <= kMatvecMaxRows && (!kPaired || unit > 0) &&
                       unit % kMatvecTileGroups == 0))
    return;
  with_storage(wdtype, [&](auto w) {
    using W = decltype(w);
    const bool vec = also_vec && a.OC % kVecOf<W> == 0 && aligned16(a.weight) &&
                     row_vec4_count(a.OC, a.out, a.bias) > 0 && unit % (kMatvecTileGroups * kVecOf<W>) == 0;
    const int width = vec ? kVecOf<W> : 1;
    const dim3 grid(ceil_div(a.OC, kMatvecTileGroups * width), ceil_div(a.C, kMatvecRowsPerSplit));
    if ((int)grid.x > kMaxGridCounters || (a.ln_weight && a.C > kMatvecMaxLayernormC)) {
      rt_fail(cudaErrorInvalidValue);
      return;
    }
    const MatvecKernel kernel = pick_matvec<kOp, W>(a.rows, vec);
    const Geometry at = {.grid = grid, .block = kMatvecThreads};
    if constexpr (kOp == kOpLinear)
      launch_op(kernel, at, a);
    else
      launch_step_op(kernel, at, matvec_task<kOp>(a, vec, wdtype), a);
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
      weight_tile[e / kTileCols][e % kTileCols] =
          k < C && n < OC ? widen(load_packed<W, 1>(weight + (size_t)k * OC + n), 0) : 0.0f;
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

extern "C" void op_linear(float* out, float* partials, const float* inp, const void* weight, const float* bias,
                          int rows, int C, int OC, int wdtype) {
  if (rt_reject_unless(is_storage_type(wdtype))) return;
  if (rows > kMatvecMaxRows) {
    with_storage(wdtype, [&](auto w) {
      using W = decltype(w);
      const Geometry at = {.grid = dim3(ceil_div(OC, kTileCols), ceil_div(rows, kTileRows)),
                           .block = dim3(kTiledThreadsX, kTiledThreadsY)};
      launch_op(linear_tiled_kernel<W>, at, out, inp, static_cast<const W*>(weight), bias, rows, C, OC);
    });
    return;
  }
  const MatvecArgs a = {.out = out,
                        .scratch = op_scratch(partials),
                        .inp = inp,
                        .weight = weight,
                        .bias = bias,
                        .rows = rows,
                        .C = C,
                        .OC = OC};
  launch_matvec<kOpLinear>(a, wdtype);
}

extern "C" void op_ln_qkv(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x,
                          const float* ln_weight, const float* ln_bias, const void* weight, const float* bias,
                          const int* state, int B, int C, int kv_C, int max_ctx, float eps, int wdtype, int kvdtype) {
  if (rt_reject_unless(is_storage_type(kvdtype))) return;
  const MatvecArgs a = {.out = qkv,
                        .scratch = op_scratch(partials),
                        .inp = x,
                        .weight = weight,
                        .bias = bias,
                        .ln_weight = ln_weight,
                        .ln_bias = ln_bias,
                        .k_cache = k_cache,
                        .v_cache = v_cache,
                        .state = state,
                        .rows = B,
                        .C = C,
                        .OC = C + 2 * kv_C,
                        .eps = eps,
                        .kvdtype = kvdtype,
                        .max_ctx = max_ctx,
                        .q_cols = C};
  // the vector variant's chunks of 4 columns land in the caches' rows: kv_C a multiple of 4 (C then is too, with OC:
  // no chunk straddles q, k and v) and the caches 16-byte aligned
  launch_matvec<kOpLnQkv>(a, wdtype, row_vec4_count(kv_C, k_cache, v_cache) > 0);
}

extern "C" void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight,
                                  const float* ln_bias, const void* weight, const float* bias, int B, int C, int OC,
                                  float eps, int wdtype) {
  const MatvecArgs a = {.out = out,
                        .scratch = op_scratch(partials),
                        .inp = x,
                        .weight = weight,
                        .bias = bias,
                        .ln_weight = ln_weight,
                        .ln_bias = ln_bias,
                        .rows = B,
                        .C = C,
                        .OC = OC,
                        .eps = eps};
  launch_matvec<kOpLnLinearGelu>(a, wdtype);
}

extern "C" void op_linear_residual(float* x, float* partials, const float* inp, const void* weight, const float* bias,
                                   int B, int C, int OC, int wdtype) {
  const MatvecArgs a = {.out = x,
                        .scratch = op_scratch(partials),
                        .inp = inp,
                        .weight = weight,
                        .bias = bias,
                        .rows = B,
                        .C = C,
                        .OC = OC};
  launch_matvec<kOpLinearResidual>(a, wdtype);
}

extern "C" void op_rms_qkv_rope(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x,
                                const float* ln_weight, const void* weight, const float* bias, const int* state,
                                const float* rope, const float* q_norm, const float* k_norm, int B, int C, int n_head,
                                int n_kv_head, int head_dim, int max_ctx, float eps, int wdtype, int kvdtype) {
  const bool shape_fits = n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0 && head_dim % 2 == 0;
  // with q/k norms, a head per warp and a head's arrival counter after the column tiles' (matvec_head_norm)
  const bool norms_fit =
      (q_norm == nullptr) == (k_norm == nullptr) &&
      (!q_norm ||
       (head_dim <= kMatvecMaxHeadDim &&
        ceil_div((n_head + 2 * n_kv_head) * head_dim, kMatvecTileGroups) + n_head + n_kv_head <= kMaxGridCounters));
  if (rt_reject_unless(shape_fits && norms_fit && is_storage_type(kvdtype))) return;
  const int Q = n_head * head_dim, KV = n_kv_head * head_dim;
  const MatvecArgs a = {.out = qkv,
                        .scratch = op_scratch(partials),
                        .inp = x,
                        .weight = weight,
                        .bias = bias,
                        .ln_weight = ln_weight,
                        .k_cache = k_cache,
                        .v_cache = v_cache,
                        .state = state,
                        .rope = rope,
                        .rows = B,
                        .C = C,
                        .OC = Q + 2 * KV,
                        .eps = eps,
                        .kvdtype = kvdtype,
                        .max_ctx = max_ctx,
                        .q_cols = Q,
                        .head_dim = head_dim,
                        .q_norm = q_norm,
                        .k_norm = k_norm};
  // the vector variant's groups of k and v land in the caches' rows, and its table rows are read as float4
  launch_matvec<kOpRmsQkvRope>(a, wdtype, aligned16(k_cache) && aligned16(v_cache) && aligned16(rope));
}

extern "C" void op_rms_gate_up(float* out, float* partials, const float* x, const float* ln_weight, const void* weight,
                               const float* bias, int B, int C, int I, float eps, int wdtype) {
  const MatvecArgs a = {.out = out,
                        .scratch = op_scratch(partials),
                        .inp = x,
                        .weight = weight,
                        .bias = bias,
                        .ln_weight = ln_weight,
                        .rows = B,
                        .C = C,
                        .OC = 2 * I,
                        .eps = eps};
  launch_matvec<kOpRmsGateUp>(a, wdtype, row_vec4_count(I, out) > 0);
}
