// op_kv_append: this step's keys and values into the caches.
// op_attention: causal attention of the T new queries over the cache, split over the key dimension in one
// launch: block (chunk, head, t) reduces one chunk of keys to partial (max, sum, acc) in scratch; the last
// block of each (t, head) to arrive merges the partials. The number of chunks depends on max_ctx only
// (positions are read from device memory), so one captured graph serves every context length.
#include <math.h>

#include "cols.h"
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

// Loads per thread, one per unit of kWidth floats: a key lane's share of a key row (hs / kWidth / 4 units), and
// a value thread's keys (64 / (256 / (hs / kWidth)) of them); both at most 128 / 4 / kWidth for hs <= 128.
template <int kWidth> struct AttnUnits {
  static constexpr int value = kAttnMaxHeadSize / kAttnLanesPerKey / kWidth;
};

// ---- op_kv_append -------------------------------------------------------------------------------------------
// k_cache, v_cache: (max_ctx, C)  qkv: (T, 3C) as [q | k | v]
// grid: (T)  block: (kKvAppendThreads); row pos + t of each cache (skipped past max_ctx); n_vec4 float4, then floats.
__global__ void __launch_bounds__(kKvAppendThreads)
    kv_append_kernel(float* __restrict__ k_cache, float* __restrict__ v_cache, const float* __restrict__ qkv,
                     const int* __restrict__ state, int C, int max_ctx, int n_vec4) {
  let_successor_start();
  wait_for_predecessor();
  const int row = __ldcg(state + STATE_POS) + blockIdx.x;
  if (row >= max_ctx) return;
  const float* k = qkv + (size_t)blockIdx.x * 3 * C + C;
  const float* v = k + C;
  float* k_dst = k_cache + (size_t)row * C;
  float* v_dst = v_cache + (size_t)row * C;
  for (int i = threadIdx.x; i < n_vec4; i += blockDim.x) {
    reinterpret_cast<float4*>(k_dst)[i] = __ldcg(reinterpret_cast<const float4*>(k) + i);
    reinterpret_cast<float4*>(v_dst)[i] = __ldcg(reinterpret_cast<const float4*>(v) + i);
  }
  for (int i = n_vec4 * kVecWidth + threadIdx.x; i < C; i += blockDim.x) {
    k_dst[i] = __ldcg(k + i);
    v_dst[i] = __ldcg(v + i);
  }
}

extern "C" void op_kv_append(void* k_any, void* v_any, const float* qkv, const int* state, int B, int T, int C, int max_ctx,
                             int kvdtype) {
  if (rt_reject_unless(B == 1 && kvdtype == DTYPE_F32)) return;
  float* k_cache = static_cast<float*>(k_any);
  float* v_cache = static_cast<float*>(v_any);
  const int n_vec4 = row_vec4_count(C, k_cache, v_cache, qkv);
  LAUNCH(kv_append_kernel, T, kKvAppendThreads, k_cache, v_cache, qkv, state, C, max_ctx, n_vec4);
}

// ---- op_attention -------------------------------------------------------------------------------------------
// Scratch, for (t, head) pair th = t * n_head + h and chunk c:
//   counters[th]                      blocks of th that have finished (the merging block resets it to 0);
//                                     max_ctx * n_head of them at the start, the same for every T
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
// The counters region is sized for the most rows a step can have (max_ctx), whatever this launch's T:
// steps of different T share one scratch, and one step's partials must never land on another's counters.
static ScratchSizes scratch_sizes(int T, int C, int n_head, int max_ctx) {
  const size_t partials = (size_t)T * n_head * attention_chunks(max_ctx);
  return {align_scratch((size_t)max_ctx * n_head * sizeof(unsigned)), align_scratch(partials * kStatsPerChunk * sizeof(float)),
          align_scratch(partials * (C / n_head) * sizeof(float))};
}

static AttnScratch scratch_layout(float* scratch, int T, int C, int n_head, int max_ctx) {
  const ScratchSizes s = scratch_sizes(T, C, n_head, max_ctx);
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

// The chunk's key and value rows this thread reads, one unit (kWidth floats) per load; rows outside [lo, hi)
// keep their values. Key lane `sub` of key j takes units sub, sub + 4, ... of the row; value thread (part, g)
// takes unit g of keys part, part + parts, ...
template <int kWidth> struct ChunkRows {
  Cols<kWidth> k[AttnUnits<kWidth>::value];
  Cols<kWidth> v[AttnUnits<kWidth>::value];
};

template <int kWidth>
__device__ __forceinline__ void load_chunk_rows(ChunkRows<kWidth>& r, const float* k, const float* v, int key0, int lo, int hi,
                                                int C, int hs) {
  const int units = hs / kWidth;
  const int key = key0 + (int)threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (key >= lo && key < hi && unit < units) r.k[u] = load_cols<kWidth>(k + (size_t)key * C + unit * kWidth);
    const int vkey = key0 + part + u * parts;
    if (part < parts && vkey >= lo && vkey < hi && vkey < key0 + kAttnKeysPerChunk)
      r.v[u] = load_cols<kWidth>(v + (size_t)vkey * C + g * kWidth);
  }
}

// One chunk of n_keys keys (>= 1) from key0 for one (query, head): scores into p, then the partial
// (max, sum, acc) into stats/acc. q: the head's query (hs floats) pre-scaled in shared memory.
template <int kWidth>
__device__ __forceinline__ void attend_chunk(float* stats, float* acc, const ChunkRows<kWidth>& r, const float* q, float* p,
                                             Cols<kWidth>* value_partial, int n_keys, int hs) {
  const int units = hs / kWidth;
  const int j = threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (unit < units)
#pragma unroll
      for (int e = 0; e < kWidth; e++) s += q[unit * kWidth + e] * r.k[u].v[e];
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
        for (int e = 0; e < kWidth; e++) a.v[e] += p[i] * r.v[u].v[e];
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

// out: (T, C)  qkv: (T, 3C) (q only)  k_cache, v_cache: (max_ctx, C); head h in columns [h * hs, (h + 1) * hs)
// grid: (n_chunks, n_head, T)  block: (kAttnThreads); block (c, h, t) takes keys [c * 64, (c + 1) * 64) of
// query t's visible keys, and does nothing but arrive when the chunk is past them (the merge reads only
// the chunks that hold keys, so such a block writes no partial).
// Every thread's key and value loads are issued before the first is used. Rows below pos were written by
// earlier steps (no kernel of this step writes them, nor state), so they are loaded before the wait for the
// predecessor; rows from pos on (this step's kv_append) and q after it.
template <int kWidth>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(float* __restrict__ out, AttnScratch scratch, const float* __restrict__ qkv,
                     const float* __restrict__ k_cache, const float* __restrict__ v_cache, const int* __restrict__ state,
                     int C, int n_head, int max_ctx, bool overlapped) {
  __shared__ float q[kAttnMaxHeadSize];
  __shared__ float p[kAttnKeysPerChunk];
  __shared__ Cols<kWidth> value_partial[kAttnThreads];
  __shared__ bool is_last;
  let_successor_start();
  const int chunk = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int n_chunks = gridDim.x;
  const int hs = C / n_head;
  const int th = t * n_head + h;
  const int pos = __ldcg(state + STATE_POS);
  const int n_keys = visible_keys(pos, t, max_ctx);
  const int key0 = chunk * kAttnKeysPerChunk;
  const float* k = k_cache + h * hs;
  const float* v = v_cache + h * hs;
  ChunkRows<kWidth> rows = {};
  if (key0 < n_keys) load_chunk_rows<kWidth>(rows, k, v, key0, 0, min(pos, n_keys), C, hs);
  wait_for_predecessor(overlapped);
  if (key0 < n_keys) {
    load_chunk_rows<kWidth>(rows, k, v, key0, pos, n_keys, C, hs);
    const float scale = 1.0f / sqrtf((float)hs);
    for (int d = threadIdx.x; d < hs; d += blockDim.x) q[d] = __ldcg(qkv + (size_t)t * 3 * C + h * hs + d) * scale;
    __syncthreads();
    float* stats = scratch.stats + ((size_t)th * n_chunks + chunk) * kStatsPerChunk;
    float* acc = scratch.acc + ((size_t)th * n_chunks + chunk) * hs;
    attend_chunk<kWidth>(stats, acc, rows, q, p, value_partial, min(kAttnKeysPerChunk, n_keys - key0), hs);
  }
  if (!arrive_last(scratch.counters + th, n_chunks, &is_last)) return;
  merge_chunks(out + (size_t)t * C + h * hs, scratch.stats + (size_t)th * n_chunks * kStatsPerChunk,
               scratch.acc + (size_t)th * n_chunks * hs, ceil_div(n_keys, kAttnKeysPerChunk), hs);
}

extern "C" size_t op_attention_scratch_bytes(int T, int C, int n_head, int max_ctx) {
  if (n_head <= 0 || C % n_head != 0) return 0;
  const ScratchSizes s = scratch_sizes(T, C, n_head, max_ctx);
  return s.counters + s.stats + s.acc;
}

extern "C" void op_attention(float* out, float* scratch, const float* qkv, const void* k_any, const void* v_any,
                             const int* state, int B, int T, int C, int n_head, int max_ctx, int kvdtype) {
  if (rt_reject_unless(B == 1 && kvdtype == DTYPE_F32 && n_head > 0 && C % n_head == 0 && C / n_head <= kAttnMaxHeadSize)) return;
  const float* k_cache = static_cast<const float*>(k_any);
  const float* v_cache = static_cast<const float*>(v_any);
  const int hs = C / n_head;
  const dim3 grid(attention_chunks(max_ctx), n_head, T);
  const AttnScratch layout = scratch_layout(scratch, T, C, n_head, max_ctx);
  if (hs % kVecWidth == 0 && aligned16(k_cache) && aligned16(v_cache))
    LAUNCH(attention_kernel<kVecWidth>, grid, kAttnThreads, out, layout, qkv, k_cache, v_cache, state, C, n_head, max_ctx,
           rt_overlapped());
  else
    LAUNCH(attention_kernel<1>, grid, kAttnThreads, out, layout, qkv, k_cache, v_cache, state, C, n_head, max_ctx,
           rt_overlapped());
}
