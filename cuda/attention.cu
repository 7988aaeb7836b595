// op_kv_append: this step's keys and values into each sequence's caches, rounded to the cache's storage type.
// op_attention: causal attention of each sequence's T new queries over its own cache, split over the key dimension
// in one launch: block (split, K/V head's query heads, row) reduces every n_splits-th 64-key chunk, a running softmax
// over them, to one partial (max, sum, acc) in scratch for each of the query heads (up to 8) that share the K/V head;
// the last block of each of its rows to arrive merges the partials.
// The splits are as many as fill the SMs with the blocks of one row (attention_splits), at most the chunks max_ctx
// has: they depend on neither the position (read from device memory, so one captured graph serves every context
// length, and a short one launches no more blocks than a long one) nor the batch (each sequence of a batch is split,
// and its sums rounded, as alone). The cache is read in its storage type (cuda/dtypes.h): 16-byte loads of 4 floats
// or 8 halves, widened where they are used.
#include "attention.h"
#include "dispatch.h"

constexpr int kKvAppendThreads = 256;
constexpr size_t kScratchAlignment = 16;

// ---- op_kv_append -------------------------------------------------------------------------------------------
// k_cache, v_cache: (B, max_ctx, kv_C) in K  qkv: (B·T, C + 2 kv_C) as [q | k | v]
// grid: (T, B)  block: (kKvAppendThreads); row pos_b + t of sequence b's caches (skipped past max_ctx): n_units units
// of kWidth values (16 bytes of K: kWidth = 4 floats or 8 halves; read as float4s), then the rest one by one.
template <typename K, int kWidth>
__global__ void __launch_bounds__(kKvAppendThreads)
    kv_append_kernel(K* __restrict__ k_cache, K* __restrict__ v_cache, const float* __restrict__ qkv,
                     const int* __restrict__ state, int T, int C, int kv_C, int max_ctx, int n_units) {
  let_successor_start();
  wait_for_predecessor();
  const int t = blockIdx.x, b = blockIdx.y;
  const int row = __ldcg(state + b * STATE_INTS + STATE_POS) + t;
  if (row >= max_ctx) return;
  const float* k = qkv + ((size_t)b * T + t) * (C + 2 * kv_C) + C;
  const float* v = k + kv_C;
  const size_t at = ((size_t)b * max_ctx + row) * kv_C;
  for (int i = threadIdx.x; i < n_units; i += blockDim.x) {
    const Cols<kWidth> kv[2] = {load_cols<kWidth>(k + i * kWidth), load_cols<kWidth>(v + i * kWidth)};
    store_rounded<K, kWidth>(k_cache + at + i * kWidth, kv[0].v);
    store_rounded<K, kWidth>(v_cache + at + i * kWidth, kv[1].v);
  }
  for (int i = n_units * kWidth + threadIdx.x; i < kv_C; i += blockDim.x) {
    const float kv[2][1] = {{__ldcg(k + i)}, {__ldcg(v + i)}};
    store_rounded<K, 1>(k_cache + at + i, kv[0]);
    store_rounded<K, 1>(v_cache + at + i, kv[1]);
  }
}

extern "C" void op_kv_append(void* k_cache, void* v_cache, const float* qkv, const int* state, int B, int T, int C,
                             int kv_C, int max_ctx, int kvdtype) {
  if (rt_reject_unless(is_storage_type(kvdtype) && B >= 1 && T >= 1 && C >= 1 && kv_C >= 1)) return;
  with_storage(kvdtype, [&](auto kind) {
    using K = decltype(kind);
    constexpr int V = kVecOf<K>;
    const bool vec = C % 4 == 0 && kv_C % V == 0 && aligned16(k_cache) && aligned16(v_cache) && aligned16(qkv);
    const auto kernel = vec ? kv_append_kernel<K, V> : kv_append_kernel<K, 1>;
    launch_op(kernel, {.grid = dim3(T, B), .block = kKvAppendThreads}, static_cast<K*>(k_cache),
              static_cast<K*>(v_cache), qkv, state, T, C, kv_C, max_ctx, vec ? kv_C / V : 0);
  });
}

// ---- op_attention -------------------------------------------------------------------------------------------
static int attention_chunks(int max_ctx) { return ceil_div(max_ctx, kAttnKeysPerChunk); }
static size_t align_scratch(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// Splits of each (row, K/V head's pass): the blocks of a one-row step fill every SM with as many as it holds, up to
// kAttnMaxSplits, none taking fewer than one chunk of max_ctx.
static int attention_splits(int C, int n_head, int n_kv_head, int max_ctx) {
  const int per_sm = C / n_head > kAttnMaxHeadSize ? kAttnWideBlocksPerSm : kAttnBlocksPerSm;
  const int blocks_per_split = n_kv_head * attention_passes(n_head / n_kv_head);
  const int filling = min(kAttnMaxSplits, ceil_div(rt_sm_count() * per_sm, blocks_per_split));
  return max(1, min(attention_chunks(max_ctx), filling));
}

struct ScratchSizes {
  size_t counters, stats, acc;
};
// The counters region is sized for the most rows a step may have (max_ctx), whatever this launch's rows: steps
// of different rows share one scratch, and one step's partials must never land on another's counters.
static ScratchSizes scratch_sizes(int rows, int C, int n_head, int n_kv_head, int max_ctx) {
  const size_t partials = (size_t)rows * n_head * attention_splits(C, n_head, n_kv_head, max_ctx);
  return {align_scratch((size_t)max_ctx * n_head * sizeof(unsigned)),
          align_scratch(partials * kStatsPerSplit * sizeof(float)),
          align_scratch(partials * (C / n_head) * sizeof(float))};
}

static AttnScratch scratch_layout(float* scratch, int rows, int C, int n_head, int n_kv_head, int max_ctx) {
  const ScratchSizes s = scratch_sizes(rows, C, n_head, n_kv_head, max_ctx);
  char* base = reinterpret_cast<char*>(scratch);
  return {reinterpret_cast<unsigned*>(base), reinterpret_cast<float*>(base + s.counters),
          reinterpret_cast<float*>(base + s.counters + s.stats)};
}

// grid: (n_splits, n_kv_head·passes, B·T)  block: (kAttnThreads): one block per (split, K/V head's query heads,
// row) of the body (cuda/attention.h). The 16-byte variants are held to kAttnBlocksPerSm blocks per SM, which the
// splits count on (left free, ptxas gave the f32 one 144 registers); the one-element fallbacks, not hot, ask one, so
// that ptxas gives them the registers for their rows rather than spilling.
template <typename K, int kWidth>
__global__ void __launch_bounds__(kAttnThreads, kWidth > 1 ? kAttnBlocksPerSm : 1)
    attention_kernel(AttnArgs a, Overlap overlap) {
  __shared__ AttnShared<kWidth> shared;
  attention<K, kWidth>(a, own_launch(overlap), shared);
}

// Head sizes past kAttnMaxHeadSize: the same body with room for twice the units. Not a persistent step body (its
// launch is rejected while a step is recorded), so the step's kernels keep the fast path's registers.
template <typename K, int kWidth>
__global__ void __launch_bounds__(kAttnThreads, 1) attention_wide_kernel(AttnArgs a, Overlap overlap) {
  __shared__ AttnShared<kWidth, kAttnWideHeadSize> shared;
  attention<K, kWidth, kAttnWideHeadSize>(a, own_launch(overlap), shared);
}

extern "C" size_t op_attention_scratch_bytes(int rows, int C, int n_head, int n_kv_head, int max_ctx) {
  if (n_head <= 0 || C % n_head != 0 || n_kv_head <= 0 || n_head % n_kv_head != 0 || rows < 1 || max_ctx < 1) return 0;
  const ScratchSizes s = scratch_sizes(rows, C, n_head, n_kv_head, max_ctx);
  return s.counters + s.stats + s.acc;
}

extern "C" void op_attention(float* out, float* scratch, const float* qkv, const void* k_cache, const void* v_cache,
                             const int* state, int B, int T, int C, int n_head, int n_kv_head, int max_ctx,
                             int kvdtype) {
  const bool heads_fit =
      n_head > 0 && C % n_head == 0 && C / n_head <= kAttnWideHeadSize && n_kv_head > 0 && n_head % n_kv_head == 0;
  // B·T rows: each (row, head) pair has its arrival counter among the max_ctx * n_head the scratch holds
  if (rt_reject_unless(is_storage_type(kvdtype) && heads_fit && B >= 1 && T >= 1 && B * T <= max_ctx)) return;
  const int hs = C / n_head, group = n_head / n_kv_head, passes = attention_passes(group);
  const dim3 grid(attention_splits(C, n_head, n_kv_head, max_ctx), n_kv_head * passes, B * T);
  const AttnArgs a = {.out = out,
                      .scratch = scratch_layout(scratch, B * T, C, n_head, n_kv_head, max_ctx),
                      .qkv = qkv,
                      .k_cache = k_cache,
                      .v_cache = v_cache,
                      .state = state,
                      .T = T,
                      .C = C,
                      .n_head = n_head,
                      .max_ctx = max_ctx,
                      .kv_C = n_kv_head * hs,
                      .group = group};
  with_storage(kvdtype, [&](auto kind) {
    using K = decltype(kind);
    constexpr int V = kVecOf<K>;
    const bool vec = hs % V == 0 && aligned16(k_cache) && aligned16(v_cache);  // every head's row start: kv_C % V == 0
    const Geometry at = {.grid = grid, .block = kAttnThreads};
    if (hs > kAttnMaxHeadSize) return launch_op(vec ? attention_wide_kernel<K, V> : attention_wide_kernel<K, 1>, at, a);
    const auto kernel = vec ? attention_kernel<K, V> : attention_kernel<K, 1>;
    const StepTaskForm task = {.kind = kTaskAttention, .vec = vec, .variant = {.kvdtype = kvdtype}};
    launch_step_op(kernel, at, task, a);
  });
}
