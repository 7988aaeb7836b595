// op_kv_append: this step's keys and values into each sequence's caches, rounded to the cache's storage type.
// op_attention: causal attention of each sequence's T new queries over its own cache, split over the key dimension
// in one launch: block (chunk, head, row) reduces one chunk of keys to partial (max, sum, acc) in scratch; the last
// block of each (row, head) to arrive merges the partials. The number of chunks depends on max_ctx only
// (positions are read from device memory), so one captured graph serves every context length. The cache is read
// in its storage type (cuda/dtypes.h): 16-byte loads of 4 floats or 8 halves, widened where they are used.
#include <math.h>

#include "cols.h"
#include "dtypes.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kKvAppendThreads = 256;
constexpr int kAttnKeysPerChunk = 64;
constexpr int kAttnThreads = 256;
constexpr int kAttnMaxHeadSize = 128;
constexpr int kAttnLanesPerKey = kAttnThreads / kAttnKeysPerChunk;  // threads sharing one key's score: 4
constexpr int kAttnMergeBatch = 8;                                  // chunks whose partials a merging thread loads at once
static_assert(kAttnLanesPerKey >= 1 && kWarpSize % kAttnLanesPerKey == 0, "a key's threads sit in one warp");
static_assert(kAttnMaxHeadSize <= kAttnThreads, "the merge gives each head dimension a thread");
constexpr size_t kScratchAlignment = 16;

// Loads per thread, one per unit of kWidth elements (16 bytes, or one element): a key lane's share of a key row (hs / kWidth / 4 units), and
// a value thread's keys (64 / (256 / (hs / kWidth)) of them); both at most 128 / 4 / kWidth for hs <= 128.
template <int kWidth> struct AttnUnits {
  static constexpr int value = kAttnMaxHeadSize / kAttnLanesPerKey / kWidth;
};

// ---- op_kv_append -------------------------------------------------------------------------------------------
// k_cache, v_cache: (B, max_ctx, C) in K  qkv: (B·T, 3C) as [q | k | v]
// grid: (T, B)  block: (kKvAppendThreads); row pos_b + t of sequence b's caches (skipped past max_ctx): n_units units of
// kWidth values (16 bytes of K: kWidth = 4 floats or 8 halves; read as float4s), then the rest one by one.
template <typename K, int kWidth>
__global__ void __launch_bounds__(kKvAppendThreads)
    kv_append_kernel(K* __restrict__ k_cache, K* __restrict__ v_cache, const float* __restrict__ qkv,
                     const int* __restrict__ state, int T, int C, int max_ctx, int n_units) {
  let_successor_start();
  wait_for_predecessor();
  const int t = blockIdx.x, b = blockIdx.y;
  const int row = __ldcg(state + b * STATE_INTS + STATE_POS) + t;
  if (row >= max_ctx) return;
  const float* k = qkv + ((size_t)b * T + t) * 3 * C + C;
  const float* v = k + C;
  const size_t at = ((size_t)b * max_ctx + row) * C;
  for (int i = threadIdx.x; i < n_units; i += blockDim.x) {
    const Cols<kWidth> kv[2] = {load_cols<kWidth>(k + i * kWidth), load_cols<kWidth>(v + i * kWidth)};
    store_rounded<K, kWidth>(k_cache + at + i * kWidth, kv[0].v);
    store_rounded<K, kWidth>(v_cache + at + i * kWidth, kv[1].v);
  }
  for (int i = n_units * kWidth + threadIdx.x; i < C; i += blockDim.x) {
    const float kv[2][1] = {{__ldcg(k + i)}, {__ldcg(v + i)}};
    store_rounded<K, 1>(k_cache + at + i, kv[0]);
    store_rounded<K, 1>(v_cache + at + i, kv[1]);
  }
}

extern "C" void op_kv_append(void* k_cache, void* v_cache, const float* qkv, const int* state, int B, int T, int C, int max_ctx,
                             int kvdtype) {
  if (rt_reject_unless(is_storage_type(kvdtype) && B >= 1 && T >= 1)) return;
  with_storage(kvdtype, [&](auto kind) {
    using K = decltype(kind);
    constexpr int V = kVecOf<K>;
    const bool vec = C % V == 0 && aligned16(k_cache) && aligned16(v_cache) && aligned16(qkv);
    const auto kernel = vec ? kv_append_kernel<K, V> : kv_append_kernel<K, 1>;
    LAUNCH(kernel, dim3(T, B), kKvAppendThreads, static_cast<K*>(k_cache), static_cast<K*>(v_cache), qkv, state, T, C, max_ctx,
           vec ? C / V : 0);
  });
}

// ---- op_attention -------------------------------------------------------------------------------------------
// Scratch, for (row, head) pair th = row * n_head + h (row = b * T + t, at most max_ctx rows) and chunk c:
//   counters[th]                      blocks of th that have finished (the merging block resets it to 0);
//                                     max_ctx * n_head of them at the start, the same for every B and T
//   stats[(th * n_chunks + c) * 2]    chunk max score m_c, then sum_j exp(s_j - m_c)
//   acc[(th * n_chunks + c) * hs + d] sum_j exp(s_j - m_c) v_j[d]
// The counters must be zero before the first launch (be_alloc returns zeroed memory); every launch leaves them zero.
struct AttnScratch {
  unsigned* counters;
  float* stats;
  float* acc;
};
enum { kStatMax = 0, kStatSum = 1, kStatsPerChunk = 2 };

static int attention_chunks(int max_ctx) { return ceil_div(max_ctx, kAttnKeysPerChunk); }
static size_t align_scratch(size_t bytes) { return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

struct ScratchSizes {
  size_t counters, stats, acc;
};
// The counters region is sized for the most rows a step may have (max_ctx), whatever this launch's rows: steps
// of different rows share one scratch, and one step's partials must never land on another's counters.
static ScratchSizes scratch_sizes(int rows, int C, int n_head, int max_ctx) {
  const size_t partials = (size_t)rows * n_head * attention_chunks(max_ctx);
  return {align_scratch((size_t)max_ctx * n_head * sizeof(unsigned)), align_scratch(partials * kStatsPerChunk * sizeof(float)),
          align_scratch(partials * (C / n_head) * sizeof(float))};
}

static AttnScratch scratch_layout(float* scratch, int rows, int C, int n_head, int max_ctx) {
  const ScratchSizes s = scratch_sizes(rows, C, n_head, max_ctx);
  char* base = reinterpret_cast<char*>(scratch);
  return {reinterpret_cast<unsigned*>(base), reinterpret_cast<float*>(base + s.counters),
          reinterpret_cast<float*>(base + s.counters + s.stats)};
}

// Keys that query t sees: cache rows [0, pos + t], within the cache.
__device__ __forceinline__ int visible_keys(int pos, int t, int max_ctx) {
#ifdef PLANT_BUG_ATTENTION
  return min(pos + t, max_ctx);  // planted bug for test/kernels.emu.test.ts: the query's own key is dropped
#else
  return min(pos + t + 1, max_ctx);
#endif
}

// The chunk's key and value rows this thread reads, one unit (kWidth elements of K, kept packed) per load; rows
// outside [lo, hi) keep their values. Key lane `sub` of key j takes units sub, sub + 4, ... of the row; value thread
// (part, g) takes unit g of keys part, part + parts, ...
template <typename K, int kWidth> struct ChunkRows {
  Packed<K, kWidth> k[AttnUnits<kWidth>::value];
  Packed<K, kWidth> v[AttnUnits<kWidth>::value];
};

template <typename K, int kWidth>
__device__ __forceinline__ void load_chunk_rows(ChunkRows<K, kWidth>& r, const K* k, const K* v, int key0, int lo, int hi,
                                                int C, int hs) {
  const int units = hs / kWidth;
  const int key = key0 + (int)threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (key >= lo && key < hi && unit < units) r.k[u] = load_packed<K, kWidth>(k + (size_t)key * C + unit * kWidth);
    const int vkey = key0 + part + u * parts;
    if (part < parts && vkey >= lo && vkey < hi && vkey < key0 + kAttnKeysPerChunk)
      r.v[u] = load_packed<K, kWidth>(v + (size_t)vkey * C + g * kWidth);
  }
}

// One chunk of n_keys keys (>= 1) from key0 for one (query, head): scores into p, then the partial
// (max, sum, acc) into stats/acc. q: the head's query (hs floats) pre-scaled in shared memory.
template <typename K, int kWidth>
__device__ __forceinline__ void attend_chunk(float* stats, float* acc, const ChunkRows<K, kWidth>& r, const float* q, float* p,
                                             Cols<kWidth>* value_partial, int n_keys, int hs) {
  const int units = hs / kWidth;
  const int j = threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (unit < units)
#pragma unroll
      for (int e = 0; e < kWidth; e++) s += q[unit * kWidth + e] * widen(r.k[u], e);
  }
#pragma unroll
  for (int offset = kAttnLanesPerKey / 2; offset > 0; offset /= 2) s += __shfl_xor_sync(kFullWarpMask, s, offset);
  if (sub == 0 && j < n_keys) p[j] = s;
  __syncthreads();
  // softmax numerators: warp 0 finds the chunk max and turns scores into exp(s - max)
  const int lane = threadIdx.x % kWarpSize;
  if (threadIdx.x / kWarpSize == 0) {
    float m = -INFINITY;
    for (int i = lane; i < n_keys; i += kWarpSize) m = fmaxf(m, p[i]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int i = lane; i < n_keys; i += kWarpSize) {
      p[i] = expf(p[i] - m);
      sum += p[i];
    }
    sum = warp_sum(sum);
    if (lane == 0) stats[kStatMax] = m, stats[kStatSum] = sum;
  }
  __syncthreads();
  // values: thread (part, g) sums its keys' unit g, weighted; the parts meet in shared memory in order
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
  if (part < parts) {
    Cols<kWidth> a = {};
#pragma unroll
    for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
      const int i = part + u * parts;
      if (i < n_keys)
#pragma unroll
        for (int e = 0; e < kWidth; e++) a.v[e] += p[i] * widen(r.v[u], e);
    }
    value_partial[threadIdx.x] = a;
  }
  __syncthreads();
  if (part == 0) {
    Cols<kWidth> a = value_partial[g];
    for (int i = 1; i < parts; i++) add_cols(a, value_partial[i * units + g]);
    store_cols<kWidth>(acc + g * kWidth, a);
  }
}

// out: (hs) = sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) sum_c over the n_used chunks with keys, merged
// kAttnMergeBatch chunks at a time (their loads in flight together) with a running max M.
__device__ __forceinline__ void merge_chunks(float* out, const float* stats, const float* acc, int n_used, int hs) {
  const int d = threadIdx.x;
  if (d >= hs) return;
  float M = -INFINITY, sum = 0.0f, a = 0.0f;
  for (int c0 = 0; c0 < n_used; c0 += kAttnMergeBatch) {
    float m[kAttnMergeBatch], s[kAttnMergeBatch], x[kAttnMergeBatch];
#pragma unroll
    for (int i = 0; i < kAttnMergeBatch; i++) {
      const int c = c0 + i;
      const bool used = c < n_used;
      m[i] = used ? __ldcg(stats + c * kStatsPerChunk + kStatMax) : -INFINITY;
      s[i] = used ? __ldcg(stats + c * kStatsPerChunk + kStatSum) : 0.0f;
      x[i] = used ? __ldcg(acc + (size_t)c * hs + d) : 0.0f;
    }
    float batch_max = M;
#pragma unroll
    for (int i = 0; i < kAttnMergeBatch; i++) batch_max = fmaxf(batch_max, m[i]);
    const float rescale = expf(M - batch_max);  // 0 on the first batch (M = -inf)
    sum *= rescale;
    a *= rescale;
#pragma unroll
    for (int i = 0; i < kAttnMergeBatch; i++) {
      const float w = expf(m[i] - batch_max);
      sum += w * s[i];
      a += w * x[i];
    }
    M = batch_max;
  }
  out[d] = a / sum;
}

// out: (B·T, C)  qkv: (B·T, 3C) (q only)  k_cache, v_cache: (B, max_ctx, C) in K; head h in columns [h * hs, (h + 1) * hs)
// grid: (n_chunks, n_head, B·T)  block: (kAttnThreads); block (c, h, row) takes keys [c * 64, (c + 1) * 64) of the
// visible keys of query t of sequence b (row = b * T + t), and does nothing but arrive when the chunk is past them
// (the merge reads only the chunks that hold keys, so such a block writes no partial).
// Every thread's key and value loads are issued before the first is used. Rows below pos_b were written by
// earlier steps (no kernel of this step writes them, nor state), so they are loaded before the wait for the
// predecessor; rows from pos_b on (this step's kv_append) and q after it.
template <typename K, int kWidth>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(float* __restrict__ out, AttnScratch scratch, const float* __restrict__ qkv,
                     const K* __restrict__ k_cache, const K* __restrict__ v_cache, const int* __restrict__ state,
                     int T, int C, int n_head, int max_ctx, bool overlapped) {
  __shared__ float q[kAttnMaxHeadSize];
  __shared__ float p[kAttnKeysPerChunk];
  __shared__ Cols<kWidth> value_partial[kAttnThreads];
  __shared__ bool is_last;
  let_successor_start();
  const int chunk = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
  const int b = row / T, t = row % T;
  const int n_chunks = gridDim.x;
  const int hs = C / n_head;
  const int th = row * n_head + h;
  const int pos = __ldcg(state + b * STATE_INTS + STATE_POS);
  const int n_keys = visible_keys(pos, t, max_ctx);
  const int key0 = chunk * kAttnKeysPerChunk;
  const K* k = k_cache + (size_t)b * max_ctx * C + h * hs;
  const K* v = v_cache + (size_t)b * max_ctx * C + h * hs;
  ChunkRows<K, kWidth> rows = {};
  if (key0 < n_keys) load_chunk_rows<K, kWidth>(rows, k, v, key0, 0, min(pos, n_keys), C, hs);
  wait_for_predecessor(overlapped);
  if (key0 < n_keys) {
    load_chunk_rows<K, kWidth>(rows, k, v, key0, pos, n_keys, C, hs);
    const float scale = 1.0f / sqrtf((float)hs);
    for (int d = threadIdx.x; d < hs; d += blockDim.x) q[d] = __ldcg(qkv + (size_t)row * 3 * C + h * hs + d) * scale;
    __syncthreads();
    float* stats = scratch.stats + ((size_t)th * n_chunks + chunk) * kStatsPerChunk;
    float* acc = scratch.acc + ((size_t)th * n_chunks + chunk) * hs;
    attend_chunk<K, kWidth>(stats, acc, rows, q, p, value_partial, min(kAttnKeysPerChunk, n_keys - key0), hs);
  }
  if (!arrive_last(scratch.counters + th, n_chunks, &is_last)) return;
  merge_chunks(out + (size_t)row * C + h * hs, scratch.stats + (size_t)th * n_chunks * kStatsPerChunk,
               scratch.acc + (size_t)th * n_chunks * hs, ceil_div(n_keys, kAttnKeysPerChunk), hs);
}

extern "C" size_t op_attention_scratch_bytes(int rows, int C, int n_head, int max_ctx) {
  if (n_head <= 0 || C % n_head != 0) return 0;
  const ScratchSizes s = scratch_sizes(rows, C, n_head, max_ctx);
  return s.counters + s.stats + s.acc;
}

extern "C" void op_attention(float* out, float* scratch, const float* qkv, const void* k_cache, const void* v_cache,
                             const int* state, int B, int T, int C, int n_head, int max_ctx, int kvdtype) {
  const bool heads_fit = n_head > 0 && C % n_head == 0 && C / n_head <= kAttnMaxHeadSize;
  // B·T rows: each (row, head) pair has its arrival counter among the max_ctx * n_head the scratch holds
  if (rt_reject_unless(is_storage_type(kvdtype) && heads_fit && B >= 1 && T >= 1 && B * T <= max_ctx)) return;
  const int hs = C / n_head;
  const dim3 grid(attention_chunks(max_ctx), n_head, B * T);
  const AttnScratch layout = scratch_layout(scratch, B * T, C, n_head, max_ctx);
  with_storage(kvdtype, [&](auto kind) {
    using K = decltype(kind);
    constexpr int V = kVecOf<K>;
    const bool vec = hs % V == 0 && aligned16(k_cache) && aligned16(v_cache);
    const auto kernel = vec ? attention_kernel<K, V> : attention_kernel<K, 1>;
    LAUNCH(kernel, grid, kAttnThreads, out, layout, qkv, static_cast<const K*>(k_cache), static_cast<const K*>(v_cache), state, T, C,
           n_head, max_ctx, rt_overlapped());
  });
}
