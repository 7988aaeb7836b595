// Decode attention as device code: the body of op_attention's kernel (cuda/attention.cu) and of the persistent
// step's attention task (cuda/persistent.cu). See cuda/attention.cu for the split over keys and the merge.
#pragma once

#include <math.h>

#include "cols.h"
#include "dtypes.h"
#include "last_block.h"
#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kAttnKeysPerChunk = 64;
constexpr int kAttnThreads = 256;
constexpr int kAttnMaxHeadSize = 128;
constexpr int kAttnLanesPerKey = kAttnThreads / kAttnKeysPerChunk;  // threads sharing one key's score: 4
constexpr int kAttnMergeBatch = 8;  // chunks whose partials a merging thread loads at once
// Dependent L2 round trips besides the cache stream (the kernel model's chain): the state before the keys, then the
// merge as a matvec's; kv_append's: the state before the rows.
constexpr int kAttnChainL2Trips = 4;
constexpr int kKvAppendChainL2Trips = 1;
static_assert(kAttnLanesPerKey >= 1 && kWarpSize % kAttnLanesPerKey == 0, "a key's threads sit in one warp");
static_assert(kAttnMaxHeadSize <= kAttnThreads, "the merge gives each head dimension a thread");

// Loads per thread, one per unit of kWidth elements (16 bytes, or one element): a key lane's share of a key row (hs /
// kWidth / 4 units), and a value thread's keys (64 / (256 / (hs / kWidth)) of them); both at most 128 / 4 / kWidth for
// hs <= 128.
template <int kWidth> struct AttnUnits {
  static constexpr int value = kAttnMaxHeadSize / kAttnLanesPerKey / kWidth;
};

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
__device__ __forceinline__ void load_chunk_rows(ChunkRows<K, kWidth>& r, const K* k, const K* v, int key0, int lo,
                                                int hi, int row_elements, int hs) {
  const int units = hs / kWidth;
  const int key = key0 + (int)threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (key >= lo && key < hi && unit < units)
      r.k[u] = load_packed<K, kWidth>(k + (size_t)key * row_elements + unit * kWidth);
    const int vkey = key0 + part + u * parts;
    if (part < parts && vkey >= lo && vkey < hi && vkey < key0 + kAttnKeysPerChunk)
      r.v[u] = load_packed<K, kWidth>(v + (size_t)vkey * row_elements + g * kWidth);
  }
}

// One chunk of n_keys keys (>= 1) from key0 for one (query, head): scores into p, then the partial
// (max, sum, acc) into stats/acc. q: the head's query (hs floats) pre-scaled in shared memory.
template <typename K, int kWidth>
__device__ __forceinline__ void attend_chunk(float* stats, float* acc, const ChunkRows<K, kWidth>& r, const float* q,
                                             float* p, Cols<kWidth>* value_partial, int n_keys, int hs) {
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

// out: (B·T, C)  qkv: (B·T, C + 2 kv_C) (q only)  k_cache, v_cache: (B, max_ctx, kv_C) in the kernel's K, where
// C = n_head·hs and kv_C = n_kv_head·hs; query head h (columns [h·hs, (h + 1)·hs)) reads K/V head h / group.
struct AttnArgs {
  float* out;
  AttnScratch scratch;
  const float* qkv;
  const void* k_cache;
  const void* v_cache;
  const int* state;
  int T, C, n_head, max_ctx;
  int kv_C;   // a cache row's elements
  int group;  // query heads per K/V head: n_head / n_kv_head
};

// Where query head h's K/V head starts in a cache row, and a qkv row's floats.
__device__ __forceinline__ int kv_head_offset(const AttnArgs& a, int h, int hs) { return h / a.group * hs; }
__device__ __forceinline__ size_t qkv_row_floats(const AttnArgs& a) { return (size_t)a.C + 2 * (size_t)a.kv_C; }

template <int kWidth> struct AttnShared {
  float q[kAttnMaxHeadSize];
  float p[kAttnKeysPerChunk];
  Cols<kWidth> value_partial[kAttnThreads];
};

// The persistent step's look-ahead for virtual block `at` (cuda/persistent.cu): its chunk's key and value rows that
// earlier steps wrote (below pos: this step's row is not written yet), the head's hs elements of each.
template <typename K> __device__ __forceinline__ L2Lines attention_lines(const AttnArgs& a, const BlockPlace& at) {
  const int chunk = at.idx.x, h = at.idx.y, b = at.idx.z / a.T;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int key0 = chunk * kAttnKeysPerChunk, end = min(min(key0 + kAttnKeysPerChunk, pos), a.max_ctx);
  if (key0 >= end) return {};
  const int hs = a.C / a.n_head;
  const size_t at_row = ((size_t)b * a.max_ctx + key0) * a.kv_C + kv_head_offset(a, h, hs);
  return {reinterpret_cast<const char*>(static_cast<const K*>(a.k_cache) + at_row),
          reinterpret_cast<const char*>(static_cast<const K*>(a.v_cache) + at_row), (size_t)a.kv_C * sizeof(K),
          end - key0, (int)(hs * sizeof(K))};
}

// grid: (n_chunks, n_head, B·T)  block: (kAttnThreads); block (c, h, row) takes keys [c * 64, (c + 1) * 64) of the
// visible keys of query t of sequence b (row = b * T + t), and does nothing but arrive when the chunk is past them
// (the merge reads only the chunks that hold keys, so such a block writes no partial).
// Every thread's key and value loads are issued before the first is used. Rows below pos_b were written by
// earlier steps (no kernel of this step writes them, nor state), so they are loaded before the wait for the
// predecessor; rows from pos_b on (this step's kv_append) and q after it.
template <typename K, int kWidth>
__device__ __forceinline__ void attention(const AttnArgs& a, const BlockPlace& at, AttnShared<kWidth>& shared) {
  __shared__ bool is_last;
  let_successor_start();
  const int chunk = at.idx.x, h = at.idx.y, row = at.idx.z;
  const int b = row / a.T, t = row % a.T;
  const int n_chunks = at.grid.x;
  const int C = a.C, hs = C / a.n_head;
  const int th = row * a.n_head + h;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int n_keys = visible_keys(pos, t, a.max_ctx);
  const int key0 = chunk * kAttnKeysPerChunk;
  const size_t head = (size_t)b * a.max_ctx * a.kv_C + kv_head_offset(a, h, hs);
  const K* k = static_cast<const K*>(a.k_cache) + head;
  const K* v = static_cast<const K*>(a.v_cache) + head;
  ChunkRows<K, kWidth> rows = {};
  if (key0 < n_keys) load_chunk_rows<K, kWidth>(rows, k, v, key0, 0, min(pos, n_keys), a.kv_C, hs);
  wait_for_inputs(at);
  if (key0 < n_keys) {
    load_chunk_rows<K, kWidth>(rows, k, v, key0, pos, n_keys, a.kv_C, hs);
    const float scale = 1.0f / sqrtf((float)hs);
    for (int d = threadIdx.x; d < hs; d += blockDim.x)
      shared.q[d] = __ldcg(a.qkv + (size_t)row * qkv_row_floats(a) + h * hs + d) * scale;
    __syncthreads();
    float* stats = a.scratch.stats + ((size_t)th * n_chunks + chunk) * kStatsPerChunk;
    float* acc = a.scratch.acc + ((size_t)th * n_chunks + chunk) * hs;
    attend_chunk<K, kWidth>(stats, acc, rows, shared.q, shared.p, shared.value_partial,
                            min(kAttnKeysPerChunk, n_keys - key0), hs);
  }
  if (!arrive_last(a.scratch.counters + th, n_chunks, &is_last)) return;
  merge_chunks(a.out + (size_t)row * C + h * hs, a.scratch.stats + (size_t)th * n_chunks * kStatsPerChunk,
               a.scratch.acc + (size_t)th * n_chunks * hs, ceil_div(n_keys, kAttnKeysPerChunk), hs);
}
