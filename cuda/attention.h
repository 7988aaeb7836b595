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
constexpr int kAttnMaxHeadSize = 128;   // the head sizes of the fast path (and of the persistent step's body)
constexpr int kAttnWideHeadSize = 256;  // op_attention's wide instantiation: the rest, with twice the registers
constexpr int kAttnLanesPerKey = kAttnThreads / kAttnKeysPerChunk;  // threads sharing one key's score: 4
constexpr int kAttnMergeBatch = 8;  // chunks whose partials a merging thread loads at once
// Query heads of one K/V head whose scores and softmax a block computes in one pass: a warp's softmax each.
constexpr int kAttnHeadsAtOnce = kAttnThreads / kWarpSize;
// Dependent L2 round trips besides the cache stream (the kernel model's chain): the state before the keys, then the
// merge as a matvec's; kv_append's: the state before the rows.
constexpr int kAttnChainL2Trips = 4;
constexpr int kKvAppendChainL2Trips = 1;
static_assert(kAttnLanesPerKey >= 1 && kWarpSize % kAttnLanesPerKey == 0, "a key's threads sit in one warp");
static_assert(kAttnWideHeadSize <= kAttnThreads, "the merge gives each head dimension a thread");

// Loads per thread, one per unit of kWidth elements (16 bytes, or one element): a key lane's share of a key row (hs /
// kWidth / 4 units), and a value thread's keys (64 / (256 / (hs / kWidth)) of them); both at most kMaxHs / 4 / kWidth
// for hs <= kMaxHs.
template <int kWidth, int kMaxHs> struct AttnUnits {
  static constexpr int value = kMaxHs / kAttnLanesPerKey / kWidth;
};

// Scratch, for (row, head) pair th = row * n_head + h (row = b * T + t, at most max_ctx rows) and chunk c:
//   counters[row * grid.y + y]        blocks of (row, y) that have finished (the merging block resets it to 0);
//                                     max_ctx * n_head of them at the start (grid.y <= n_head), for every B and T
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
template <typename K, int kWidth, int kMaxHs> struct ChunkRows {
  Packed<K, kWidth> k[AttnUnits<kWidth, kMaxHs>::value];
  Packed<K, kWidth> v[AttnUnits<kWidth, kMaxHs>::value];
};

template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void load_chunk_rows(ChunkRows<K, kWidth, kMaxHs>& r, const K* k, const K* v, int key0,
                                                int lo, int hi, int row_elements, int hs) {
  const int units = hs / kWidth;
  const int key = key0 + (int)threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (key >= lo && key < hi && unit < units)
      r.k[u] = load_packed<K, kWidth>(k + (size_t)key * row_elements + unit * kWidth);
    const int vkey = key0 + part + u * parts;
    if (part < parts && vkey >= lo && vkey < hi && vkey < key0 + kAttnKeysPerChunk)
      r.v[u] = load_packed<K, kWidth>(v + (size_t)vkey * row_elements + g * kWidth);
  }
}

template <int kWidth, int kMaxHs = kAttnMaxHeadSize> struct AttnShared {
  float q[kAttnHeadsAtOnce * kMaxHs];  // a pass's queries, head i's at i·hs
  float p[kAttnHeadsAtOnce][kAttnKeysPerChunk];
  Cols<kWidth> value_partial[kAttnThreads];
};

// Where query head th's (its (row, head) pair) partial for `chunk` lands in scratch: (max, sum), then its acc.
__device__ __forceinline__ float* chunk_stats(const AttnScratch& s, int th, int n_chunks, int chunk) {
  return s.stats + ((size_t)th * n_chunks + chunk) * kStatsPerChunk;
}
__device__ __forceinline__ float* chunk_acc(const AttnScratch& s, int th, int n_chunks, int chunk, int hs) {
  return s.acc + ((size_t)th * n_chunks + chunk) * hs;
}

// Chunk `chunk` (n_keys >= 1 keys) for query heads th0 .. th0 + n_heads - 1 (n_heads <= kAttnHeadsAtOnce) that
// share its K/V rows `r`: every head's scores into p, the heads' softmax numerators side by side (a warp each),
// then each head's values in turn, its partial (max, sum, acc) into scratch (its pointers computed where they are
// stored: the persistent f32 step has no registers to hold them). shared.q: the heads' queries, pre-scaled.
template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void attend_chunk(const AttnScratch& scratch, int th0, int n_chunks, int chunk,
                                             const ChunkRows<K, kWidth, kMaxHs>& r, AttnShared<kWidth, kMaxHs>& shared,
                                             int n_heads, int n_keys, int hs) {
  const int units = hs / kWidth;
  const int j = threadIdx.x / kAttnLanesPerKey, sub = threadIdx.x % kAttnLanesPerKey;
  for (int i = 0; i < n_heads; i++) {
    const float* q = shared.q + i * hs;
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
      const int unit = sub + u * kAttnLanesPerKey;
      if (unit < units)
#pragma unroll
        for (int e = 0; e < kWidth; e++) s += q[unit * kWidth + e] * widen(r.k[u], e);
    }
#pragma unroll
    for (int offset = kAttnLanesPerKey / 2; offset > 0; offset /= 2) s += __shfl_xor_sync(kFullWarpMask, s, offset);
    if (sub == 0 && j < n_keys) shared.p[i][j] = s;
  }
  __syncthreads();
  // softmax numerators: warp i finds head i's chunk max and turns its scores into exp(s - max)
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (warp < n_heads) {
    float* p = shared.p[warp];
    float m = -INFINITY;
    for (int k = lane; k < n_keys; k += kWarpSize) m = fmaxf(m, p[k]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int k = lane; k < n_keys; k += kWarpSize) {
      p[k] = expf(p[k] - m);
      sum += p[k];
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      float* stats = chunk_stats(scratch, th0 + warp, n_chunks, chunk);
      stats[kStatMax] = m, stats[kStatSum] = sum;
    }
  }
  __syncthreads();
  // values, a head at a time: thread (part, g) sums its keys' unit g, weighted; the parts meet in shared memory in
  // order
  const int parts = kAttnThreads / units, part = threadIdx.x / units, g = threadIdx.x % units;
  for (int i = 0; i < n_heads; i++) {
    if (part < parts) {
      Cols<kWidth> a = {};
#pragma unroll
      for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
        const int key = part + u * parts;
        if (key < n_keys)
#pragma unroll
          for (int e = 0; e < kWidth; e++) a.v[e] += shared.p[i][key] * widen(r.v[u], e);
      }
      shared.value_partial[threadIdx.x] = a;
    }
    __syncthreads();
    if (part == 0) {
      Cols<kWidth> a = shared.value_partial[g];
      for (int k = 1; k < parts; k++) add_cols(a, shared.value_partial[k * units + g]);
      store_cols<kWidth>(chunk_acc(scratch, th0 + i, n_chunks, chunk, hs) + g * kWidth, a);
    }
    if (i + 1 < n_heads) __syncthreads();  // the next head rewrites value_partial
  }
}

// out: (hs) = sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) sum_c over the n_used chunks with keys, merged
// kAttnMergeBatch chunks at a time (their loads in flight together) with a running max M; this thread's element d.
__device__ __forceinline__ void merge_chunks(float* out, const float* stats, const float* acc, int n_used, int hs,
                                             int d) {
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
// C = n_head·hs and kv_C = n_kv_head·hs; query heads [g·group, (g + 1)·group) (columns [h·hs, (h + 1)·hs) each)
// read K/V head g.
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

// Blocks per K/V head and chunk: one per kAttnHeadsAtOnce of its query heads.
__host__ __device__ inline int attention_passes(int group) { return ceil_div(group, kAttnHeadsAtOnce); }

__device__ __forceinline__ size_t qkv_row_floats(const AttnArgs& a) { return (size_t)a.C + 2 * (size_t)a.kv_C; }

// The persistent step's look-ahead for virtual block `at` (cuda/persistent.cu): its chunk's key and value rows that
// earlier steps wrote (below pos: this step's row is not written yet), the head's hs elements of each.
template <typename K> __device__ __forceinline__ L2Lines attention_lines(const AttnArgs& a, const BlockPlace& at) {
  const int chunk = at.idx.x, kv_head = at.idx.y / attention_passes(a.group), b = at.idx.z / a.T;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int key0 = chunk * kAttnKeysPerChunk, end = min(min(key0 + kAttnKeysPerChunk, pos), a.max_ctx);
  if (key0 >= end) return {};
  const int hs = a.C / a.n_head;
  const size_t at_row = ((size_t)b * a.max_ctx + key0) * a.kv_C + (size_t)kv_head * hs;
  return {reinterpret_cast<const char*>(static_cast<const K*>(a.k_cache) + at_row),
          reinterpret_cast<const char*>(static_cast<const K*>(a.v_cache) + at_row), (size_t)a.kv_C * sizeof(K),
          end - key0, (int)(hs * sizeof(K))};
}

// grid: (n_chunks, n_kv_head·passes, B·T)  block: (kAttnThreads); block (c, y, row) takes keys [c * 64, (c + 1) * 64)
// of the visible keys of query t of sequence b (row = b * T + t) for the query heads [h0, h0 + n_heads) of K/V head
// g = y / passes (at most kAttnHeadsAtOnce of them, h0 = g·group + (y % passes)·kAttnHeadsAtOnce): it loads the
// chunk's key and value rows once for them all (GQA's saving is these bytes: once per K/V head wherever a group has
// at most kAttnHeadsAtOnce heads). A block past the visible keys does nothing but arrive (the merge reads only the
// chunks that hold keys, so such a block writes no partial). The last block of (row, y) to arrive merges its heads.
// Every thread's key and value loads are issued before the first is used. Rows below pos_b were written by
// earlier steps (no kernel of this step writes them, nor state), so they are loaded before the wait for the
// predecessor; rows from pos_b on (this step's kv_append) and q after it.
template <typename K, int kWidth, int kMaxHs = kAttnMaxHeadSize>
__device__ __forceinline__ void attention(const AttnArgs& a, const BlockPlace& at, AttnShared<kWidth, kMaxHs>& shared) {
  __shared__ bool is_last;
  let_successor_start();
  const int chunk = at.idx.x, row = at.idx.z;
  const int b = row / a.T, t = row % a.T;
  const int n_chunks = at.grid.x;
  const int hs = a.C / a.n_head;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int n_keys = visible_keys(pos, t, a.max_ctx);
  const int key0 = chunk * kAttnKeysPerChunk;
  const size_t head = (size_t)b * a.max_ctx * a.kv_C + (size_t)(at.idx.y / attention_passes(a.group)) * hs;
  const K* k = static_cast<const K*>(a.k_cache) + head;
  const K* v = static_cast<const K*>(a.v_cache) + head;
  // the block's query heads, from the indices again where they are used: no register holds them across the loads
  const auto in_group = [&] { return at.idx.y % attention_passes(a.group) * kAttnHeadsAtOnce; };
  const auto first_head = [&] { return at.idx.y / attention_passes(a.group) * a.group + in_group(); };
  const auto heads = [&] { return min(kAttnHeadsAtOnce, a.group - in_group()); };
  ChunkRows<K, kWidth, kMaxHs> rows = {};
  if (key0 < n_keys) load_chunk_rows<K, kWidth, kMaxHs>(rows, k, v, key0, 0, min(pos, n_keys), a.kv_C, hs);
  wait_for_inputs(at);
  if (key0 < n_keys) {
    load_chunk_rows<K, kWidth, kMaxHs>(rows, k, v, key0, pos, n_keys, a.kv_C, hs);
    // the heads' queries: consecutive columns of the row
    const float scale = 1.0f / sqrtf((float)hs);
    const int h0 = first_head(), n_heads = heads();
    const float* q = a.qkv + (size_t)row * qkv_row_floats(a) + (size_t)h0 * hs;
    // one load per thread for up to 256 / hs heads; a loop rather than loads in flight together, whose registers the
    // persistent f32 step has not to spare beside the chunk's rows
    for (int e = threadIdx.x; e < n_heads * hs; e += kAttnThreads) shared.q[e] = __ldcg(q + e) * scale;
    __syncthreads();
    attend_chunk<K, kWidth, kMaxHs>(a.scratch, row * a.n_head + h0, n_chunks, chunk, rows, shared, n_heads,
                                    min(kAttnKeysPerChunk, n_keys - key0), hs);
  }
  if (!arrive_last(a.scratch.counters + (size_t)row * at.grid.y + at.idx.y, n_chunks, &is_last)) return;
  const int h0 = first_head(), n_heads = heads(), th0 = row * a.n_head + h0;
  // the block's heads side by side: kAttnThreads / hs of them at a time, one thread per element
  const int heads_at_once = kAttnThreads / hs, tid = threadIdx.x, d = tid % hs;
  for (int i = tid / hs; i < n_heads && tid < heads_at_once * hs; i += heads_at_once) {
    const int th = th0 + i;
    merge_chunks(a.out + (size_t)row * a.C + (size_t)(h0 + i) * hs, chunk_stats(a.scratch, th, n_chunks, 0),
                 chunk_acc(a.scratch, th, n_chunks, 0, hs), ceil_div(n_keys, kAttnKeysPerChunk), hs, d);
  }
}
