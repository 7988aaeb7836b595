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
constexpr int kAttnMergeBatch = 16;  // splits whose partials a merging thread loads at once
// Most splits per (row, K/V head's pass): a merge of at most 2 batches. Filling the SMs with more (132 for one K/V
// head read in 2 passes) put 32 dependent L2 round trips into its merging block, longer than a small cache's stream.
constexpr int kAttnMaxSplits = 2 * kAttnMergeBatch;
// Blocks of a kernel an SM holds (registers: the fast path's <= 128, the wide one's more), which the splits fill
constexpr int kAttnBlocksPerSm = 2;
constexpr int kAttnWideBlocksPerSm = 1;
constexpr int kAttnWarps = kAttnThreads / kWarpSize;
// Query heads of one K/V head whose scores and softmax a block computes in one pass: a warp's softmax each.
constexpr int kAttnHeadsAtOnce = kAttnWarps;
// Shared floats for the weighed values of a round of heads, one hs-vector per (head, slot) (weigh_chunk): 16 KB
constexpr int kAttnWeighedFloats = 4096;
// Dependent L2 round trips besides the cache stream (the kernel model's chain): the state before the keys, the
// partial stored, the arrival counted; the merge adds one a kAttnMergeBatch of splits. kv_append's: the state before
// the rows.
constexpr int kAttnChainL2Trips = 3;
constexpr int kKvAppendChainL2Trips = 1;
static_assert(kAttnLanesPerKey >= 1 && kWarpSize % kAttnLanesPerKey == 0, "a key's threads sit in one warp");
static_assert(kAttnWideHeadSize <= kAttnThreads, "the merge gives each head dimension a thread");
static_assert(kAttnWeighedFloats >= 2 * kAttnThreads * 8, "a round holds two heads of the most slots: a thread each");

// Loads per thread, one per unit of kWidth elements (16 bytes, or one element): a key lane's share of a key row (hs /
// kWidth / 4 units), and a value thread's keys (64 / (256 / (hs / kWidth)) of them); both at most kMaxHs / 4 / kWidth
// for hs <= kMaxHs.
template <int kWidth, int kMaxHs> struct AttnUnits {
  static constexpr int value = kMaxHs / kAttnLanesPerKey / kWidth;
};

// Scratch, for (row, head) pair th = row * n_head + h (row = b * T + t, at most max_ctx rows) and split s:
//   counters[row * grid.y + y]        blocks of (row, y) that have finished (the merging block resets it to 0);
//                                     max_ctx * n_head of them at the start (grid.y <= n_head), for every B and T
//   stats[(th * n_splits + s) * 2]    the split's max score m_s, then sum_j exp(s_j - m_s) over its keys j
//   acc[(th * n_splits + s) * hs + d] sum_j exp(s_j - m_s) v_j[d]
// The counters must be zero before the first launch (be_alloc returns zeroed memory); every launch leaves them zero.
struct AttnScratch {
  unsigned* counters;
  float* stats;
  float* acc;
};
enum { kStatMax = 0, kStatSum = 1, kStatsPerSplit = 2 };  // merge_splits reads (max, sum) as one float2

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

// Registers a thread's share of a chunk's rows takes (a 16-bit element a register where it is loaded alone), and
// whether the next chunk's rows are loaded while this one's are worked on: where both fit, as the 16-bit fast path's
// 32 do (f32's 64 beside 64 more do not fit two blocks per SM: ptxas gave that kernel 151 registers).
template <typename K, int kWidth, int kMaxHs>
constexpr int kChunkRowRegisters = 2 * AttnUnits<kWidth, kMaxHs>::value * ((sizeof(Packed<K, kWidth>) + 3) / 4);
template <typename K, int kWidth, int kMaxHs>
constexpr bool kChunkRowsPipelined = kChunkRowRegisters<K, kWidth, kMaxHs> <= 32;

template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void load_chunk_keys(ChunkRows<K, kWidth, kMaxHs>& r, const K* k, int key0, int lo, int hi,
                                                int row_elements, int hs, int tid) {
  const int units = hs / kWidth;
  const int key = key0 + tid / kAttnLanesPerKey, sub = tid % kAttnLanesPerKey;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (key >= lo && key < hi && unit < units)
      r.k[u] = load_packed<K, kWidth>(k + (size_t)key * row_elements + unit * kWidth);
  }
}

template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void load_chunk_values(ChunkRows<K, kWidth, kMaxHs>& r, const K* v, int key0, int lo, int hi,
                                                  int row_elements, int hs, int tid) {
  const int units = hs / kWidth;
  const int parts = kAttnThreads / units, part = tid / units, g = tid % units;
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
    const int vkey = key0 + part + u * parts;
    if (part < parts && vkey >= lo && vkey < hi && vkey < key0 + kAttnKeysPerChunk)
      r.v[u] = load_packed<K, kWidth>(v + (size_t)vkey * row_elements + g * kWidth);
  }
}

template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void load_chunk_rows(ChunkRows<K, kWidth, kMaxHs>& r, const K* k, const K* v, int key0,
                                                int lo, int hi, int row_elements, int hs, int tid) {
  load_chunk_keys<K, kWidth, kMaxHs>(r, k, key0, lo, hi, row_elements, hs, tid);
  load_chunk_values<K, kWidth, kMaxHs>(r, v, key0, lo, hi, row_elements, hs, tid);
}

// A head's running softmax over a split's chunks: max score, sum of exp(s - max), and by how much the last chunk's
// new max shrank what came before (exp(old max - new max)).
struct AttnRunning {
  float max, sum, rescale;
};

// q and weighed are read and written as float4s (read_cols, store_cols).
template <int kWidth, int kMaxHs = kAttnMaxHeadSize> struct AttnShared {
  alignas(16) float q[kAttnHeadsAtOnce * kMaxHs];  // a pass's queries, head i's at i·hs
  float acc[kAttnHeadsAtOnce * kMaxHs];            // the split's weighted values so far, head i's at i·hs
  float p[kAttnHeadsAtOnce][kAttnKeysPerChunk];
  AttnRunning run[kAttnHeadsAtOnce];
  alignas(16) float weighed[kAttnWeighedFloats];
};

// Where query head th's (its (row, head) pair) partial for `split` lands in scratch: (max, sum), then its acc.
__device__ __forceinline__ float* split_stats(const AttnScratch& s, int th, int n_splits, int split) {
  return s.stats + ((size_t)th * n_splits + split) * kStatsPerSplit;
}
__device__ __forceinline__ float* split_acc(const AttnScratch& s, int th, int n_splits, int split, int hs) {
  return s.acc + ((size_t)th * n_splits + split) * hs;
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

// Where K/V head g's rows of sequence b start in the cache (the block's, from its indices), in elements.
__device__ __forceinline__ size_t kv_head_start(const AttnArgs& a, const BlockPlace& at) {
  const int b = at.idx.z / a.T, g = at.idx.y / attention_passes(a.group);
  return (size_t)b * a.max_ctx * a.kv_C + (size_t)g * (a.C / a.n_head);
}

// Scores of a chunk's n_keys keys (its K rows in `r`) for query heads 0 .. n_heads - 1 of shared.q into shared.p:
// each unit of a key row widened once, for all the heads.
template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void score_chunk(const ChunkRows<K, kWidth, kMaxHs>& r, AttnShared<kWidth, kMaxHs>& shared,
                                            int n_heads, int n_keys, int hs, int tid) {
  const int units = hs / kWidth;
  const int j = tid / kAttnLanesPerKey, sub = tid % kAttnLanesPerKey;
  float s[kAttnHeadsAtOnce] = {};
#pragma unroll
  for (int u = 0; u < AttnUnits<kWidth, kMaxHs>::value; u++) {
    const int unit = sub + u * kAttnLanesPerKey;
    if (unit >= units) continue;
    float key[kWidth];
#pragma unroll
    for (int e = 0; e < kWidth; e++) key[e] = widen(r.k[u], e);
#pragma unroll
    for (int i = 0; i < kAttnHeadsAtOnce; i++) {
      if (i >= n_heads) break;
      const Cols<kWidth> q = read_cols<kWidth>(shared.q + i * hs + unit * kWidth);
#pragma unroll
      for (int e = 0; e < kWidth; e++) s[i] += q.v[e] * key[e];
    }
  }
#pragma unroll
  for (int i = 0; i < kAttnHeadsAtOnce; i++) {
    if (i >= n_heads) break;
#pragma unroll
    for (int offset = kAttnLanesPerKey / 2; offset > 0; offset /= 2)
      s[i] += __shfl_xor_sync(kFullWarpMask, s[i], offset);
    if (sub == 0 && j < n_keys) shared.p[i][j] = s[i];
  }
}

// A head's running max and sum of exp(s - max) over the chunks so far (`run`, in shared memory: registers held across
// the chunks are the rows'), taken past one more chunk of n_keys scores p by a warp: the scores become exp(s - new
// max), the sum is rescaled to the new max and grows by them, and run.rescale says by how much the values weighed so
// far shrink (0 at the first chunk: max -inf).
__device__ __forceinline__ void softmax_chunk(AttnRunning& run, float* p, int n_keys, int tid) {
  const int lane = tid % kWarpSize;
  const float run_max = run.max;
  float m = run_max;
  for (int k = lane; k < n_keys; k += kWarpSize) m = fmaxf(m, p[k]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int k = lane; k < n_keys; k += kWarpSize) {
    p[k] = expf(p[k] - m);
    sum += p[k];
  }
  sum = warp_sum(sum);
  const float shrink = expf(run_max - m);
  __syncwarp();  // every lane has read the old max
  if (lane == 0) run = {m, run.sum * shrink + sum, shrink};
}

// Each head's values of a chunk (V rows in `r`), weighed by shared.p, added to shared.acc after its rescale. Thread
// (part, g) weighs unit g of keys part, part + parts, ... (each unit widened again for every head: a copy widened
// once by hand takes 26 more registers in f16, which spill the persistent step's f16 bodies). Where a row's
// units divide a warp, every thread has a part, the parts meet by shuffles and a slot is a warp; else a slot is a part.
// The slots meet in shared memory, a round of heads at a time, each (head, element) added up by one thread in slot
// order.
template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void weigh_chunk(const ChunkRows<K, kWidth, kMaxHs>& r, AttnShared<kWidth, kMaxHs>& shared,
                                            int n_heads, int n_keys, int hs, int tid) {
  constexpr int kUnits = AttnUnits<kWidth, kMaxHs>::value;
  const int units = hs / kWidth;
  const int parts = kAttnThreads / units, part = tid / units, g = tid % units;
  const bool warp_slots = kWarpSize % units == 0 && units < kWarpSize;
  const int slots = warp_slots ? kAttnWarps : parts, slot = warp_slots ? tid / kWarpSize : part;
  const bool writes = warp_slots ? tid % kWarpSize < units : part < parts;
  const int round_heads = kAttnWeighedFloats / (slots * hs);
  for (int i0 = 0; i0 < n_heads; i0 += round_heads) {
    const int round_end = min(n_heads, i0 + round_heads);
    for (int i = i0; i < round_end; i++) {
      Cols<kWidth> a = {};
      if (part < parts)
#pragma unroll
        for (int u = 0; u < kUnits; u++) {
          const int key = part + u * parts;
          if (key >= n_keys) break;
          const float w = shared.p[i][key];
#pragma unroll
          for (int e = 0; e < kWidth; e++) a.v[e] += w * widen(r.v[u], e);
        }
      if (warp_slots)
        for (int offset = units; offset < kWarpSize; offset *= 2)
#pragma unroll
          for (int e = 0; e < kWidth; e++) a.v[e] += __shfl_xor_sync(kFullWarpMask, a.v[e], offset);
      if (writes) store_cols(shared.weighed + ((i - i0) * slots + slot) * hs + g * kWidth, a);
    }
    __syncthreads();
    // the round's elements (head i0 + i, d), every kAttnThreads-th from tid's: one division, then subtractions
    for (int i = tid / hs, d = tid % hs; i < round_end - i0;) {
      const float* weighed = shared.weighed + i * slots * hs + d;
      float sum = weighed[0];
      for (int sl = 1; sl < slots; sl++) sum += weighed[sl * hs];
      float* acc = shared.acc + (i0 + i) * hs + d;
      *acc = *acc * shared.run[i0 + i].rescale + sum;
      for (d += kAttnThreads; d >= hs; d -= hs) i++;
    }
    if (round_end < n_heads) __syncthreads();  // the next round rewrites weighed
  }
}

// Block `at`'s split of the n_keys keys for its n_heads query heads from th0 (n_heads <= kAttnHeadsAtOnce, their
// queries in shared.q, pre-scaled), which share one K/V head's rows: its chunks split, split + n_splits, ... one after
// another with a running softmax, to one partial (max, sum, acc) per head in scratch. `r` holds the first chunk's
// rows. Pipelined, the next chunk's keys are loaded once this one's are scored and its values once this one's are
// weighed, so that they arrive while this chunk is worked on; else a chunk's rows are loaded as its turn comes, and
// the SM's other block works meanwhile. The cache pointers and the threads' shares are worked out again in every
// chunk: held across the loop, they took registers the rows need (the persistent f32 bodies spilled).
template <typename K, int kWidth, int kMaxHs>
__device__ __forceinline__ void attend_split(const AttnArgs& a, const BlockPlace& at, ChunkRows<K, kWidth, kMaxHs>& r,
                                             AttnShared<kWidth, kMaxHs>& shared, int th0, int n_heads, int n_keys) {
  constexpr bool kPipelined = kChunkRowsPipelined<K, kWidth, kMaxHs>;
  const int hs = a.C / a.n_head, split = at.idx.x, n_splits = at.grid.x;
  if ((int)threadIdx.x < n_heads) shared.run[threadIdx.x] = {-INFINITY, 0.0f, 0.0f};
  for (int e = threadIdx.x; e < n_heads * hs; e += kAttnThreads) shared.acc[e] = 0.0f;
  const int stride = n_splits * kAttnKeysPerChunk;
  for (int key0 = split * kAttnKeysPerChunk; key0 < n_keys; key0 += stride) {
    const int chunk_keys = min(kAttnKeysPerChunk, n_keys - key0), next = key0 + stride;
    // what the loads' offsets and the threads' shares derive from, opaque to the compiler from here on: it works them
    // out in every chunk instead of holding them in registers across the loop
    int tid = threadIdx.x, hs_here = hs, row_elements = a.kv_C;
    asm volatile("" : "+r"(tid), "+r"(hs_here), "+r"(row_elements));
    const K* k = static_cast<const K*>(a.k_cache) + kv_head_start(a, at);
    const K* v = static_cast<const K*>(a.v_cache) + kv_head_start(a, at);
    if (!kPipelined && key0 != split * kAttnKeysPerChunk)
      load_chunk_rows<K, kWidth, kMaxHs>(r, k, v, key0, 0, n_keys, row_elements, hs_here, tid);
    score_chunk<K, kWidth, kMaxHs>(r, shared, n_heads, chunk_keys, hs_here, tid);
    if (kPipelined && next < n_keys)
      load_chunk_keys<K, kWidth, kMaxHs>(r, k, next, 0, n_keys, row_elements, hs_here, tid);
    __syncthreads();
    const int warp = tid / kWarpSize;
    if (warp < n_heads) softmax_chunk(shared.run[warp], shared.p[warp], chunk_keys, tid);
    __syncthreads();
    weigh_chunk<K, kWidth, kMaxHs>(r, shared, n_heads, chunk_keys, hs_here, tid);
    if (kPipelined && next < n_keys)
      load_chunk_values<K, kWidth, kMaxHs>(r, v, next, 0, n_keys, row_elements, hs_here, tid);
    __syncthreads();  // the next chunk rewrites p; acc is read below
  }
  if ((int)threadIdx.x < n_heads) {
    float* stats = split_stats(a.scratch, th0 + threadIdx.x, n_splits, split);
    stats[kStatMax] = shared.run[threadIdx.x].max, stats[kStatSum] = shared.run[threadIdx.x].sum;
  }
  for (int e = threadIdx.x; e < n_heads * hs; e += kAttnThreads)
    split_acc(a.scratch, th0 + e / hs, n_splits, split, hs)[e % hs] = shared.acc[e];
}

// out: (hs) = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) sum_s over the n_parts splits that had keys, merged
// kAttnMergeBatch splits at a time (their loads in flight together) with a running max M; this thread's element d.
__device__ __forceinline__ void merge_splits(float* out, const float* stats, const float* acc, int n_parts, int hs,
                                             int d) {
  float M = -INFINITY, sum = 0.0f, a = 0.0f;
  for (int s0 = 0; s0 < n_parts; s0 += kAttnMergeBatch) {
    float m[kAttnMergeBatch], s[kAttnMergeBatch], x[kAttnMergeBatch];
#pragma unroll
    for (int i = 0; i < kAttnMergeBatch; i++) {
      const int split = s0 + i;
      const bool used = split < n_parts;
      const float2 stat =
          used ? __ldcg(reinterpret_cast<const float2*>(stats + split * kStatsPerSplit)) : make_float2(-INFINITY, 0.0f);
      m[i] = stat.x, s[i] = stat.y;
      x[i] = used ? __ldcg(acc + (size_t)split * hs + d) : 0.0f;
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

// The persistent step's look-ahead for virtual block `at` (cuda/persistent.cu): its split's first chunk's key and
// value rows that earlier steps wrote (below pos: this step's row is not written yet), the head's hs elements of each.
template <typename K> __device__ __forceinline__ L2Lines attention_lines(const AttnArgs& a, const BlockPlace& at) {
  const int split = at.idx.x, b = at.idx.z / a.T;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int key0 = split * kAttnKeysPerChunk, end = min(min(key0 + kAttnKeysPerChunk, pos), a.max_ctx);
  if (key0 >= end) return {};
  const int hs = a.C / a.n_head;
  const size_t at_row = kv_head_start(a, at) + (size_t)key0 * a.kv_C;
  return {reinterpret_cast<const char*>(static_cast<const K*>(a.k_cache) + at_row),
          reinterpret_cast<const char*>(static_cast<const K*>(a.v_cache) + at_row), (size_t)a.kv_C * sizeof(K),
          end - key0, (int)(hs * sizeof(K))};
}

// grid: (n_splits, n_kv_head·passes, B·T)  block: (kAttnThreads); block (s, y, row) takes the 64-key chunks s,
// s + n_splits, ... of the visible keys of query t of sequence b (row = b * T + t) for the query heads [h0, h0 +
// n_heads) of K/V head g = y / passes (at most kAttnHeadsAtOnce of them, h0 = g·group + (y % passes)·kAttnHeadsAtOnce):
// it loads each chunk's key and value rows once for them all (GQA's saving is these bytes: once per K/V head wherever a
// group has at most kAttnHeadsAtOnce heads). A split past the visible keys' chunks does nothing: the min(n_splits,
// chunks) splits that have keys write a partial each and count themselves in, and the last of them to arrive merges
// its heads. Every thread's key and value loads are issued before the first is used. Rows below pos_b were written
// by earlier steps (no kernel of this step writes them, nor state), so the first chunk's are loaded before the wait
// for the predecessor; its rows from pos_b on (this step's kv_append), q and every later chunk after it.
template <typename K, int kWidth, int kMaxHs = kAttnMaxHeadSize>
__device__ __forceinline__ void attention(const AttnArgs& a, const BlockPlace& at, AttnShared<kWidth, kMaxHs>& shared) {
  __shared__ bool is_last;
  let_successor_start();
  const int split = at.idx.x, n_splits = at.grid.x, row = at.idx.z;
  const int b = row / a.T, t = row % a.T;
  const int hs = a.C / a.n_head;
  const int pos = __ldcg(a.state + b * STATE_INTS + STATE_POS);
  const int n_keys = visible_keys(pos, t, a.max_ctx);
  const int key0 = split * kAttnKeysPerChunk;
  const K* k = static_cast<const K*>(a.k_cache) + kv_head_start(a, at);
  const K* v = static_cast<const K*>(a.v_cache) + kv_head_start(a, at);
  // the block's query heads, from the indices again where they are used: no register holds them across the loads
  const auto in_group = [&] { return at.idx.y % attention_passes(a.group) * kAttnHeadsAtOnce; };
  const auto first_head = [&] { return at.idx.y / attention_passes(a.group) * a.group + in_group(); };
  const auto heads = [&] { return min(kAttnHeadsAtOnce, a.group - in_group()); };
  ChunkRows<K, kWidth, kMaxHs> rows = {};
  if (key0 < n_keys) load_chunk_rows<K, kWidth, kMaxHs>(rows, k, v, key0, 0, min(pos, n_keys), a.kv_C, hs, threadIdx.x);
  wait_for_inputs(at);  // every block, even one without keys: the persistent step's later virtual blocks do not wait
  if (key0 >= n_keys) return;
  load_chunk_rows<K, kWidth, kMaxHs>(rows, k, v, key0, pos, n_keys, a.kv_C, hs, threadIdx.x);
  // the heads' queries: consecutive columns of the row
  const float scale = 1.0f / sqrtf((float)hs);
  const int h0 = first_head(), n_heads = heads();
  const float* q = a.qkv + (size_t)row * qkv_row_floats(a) + (size_t)h0 * hs;
  // one load per thread for up to 256 / hs heads; a loop rather than loads in flight together, whose registers the
  // persistent f32 step has not to spare beside the chunk's rows
  for (int e = threadIdx.x; e < n_heads * hs; e += kAttnThreads) shared.q[e] = __ldcg(q + e) * scale;
  __syncthreads();
  attend_split<K, kWidth, kMaxHs>(a, at, rows, shared, row * a.n_head + h0, n_heads, n_keys);
  const int n_parts = min(n_splits, ceil_div(n_keys, kAttnKeysPerChunk));
  if (!arrive_last(a.scratch.counters + (size_t)row * at.grid.y + at.idx.y, n_parts, &is_last)) return;
  const int th0 = row * a.n_head + first_head();
  // the block's heads side by side: kAttnThreads / hs of them at a time, one thread per element
  const int heads_at_once = kAttnThreads / hs, tid = threadIdx.x, d = tid % hs;
  for (int i = tid / hs; i < heads() && tid < heads_at_once * hs; i += heads_at_once) {
    const int th = th0 + i;
    merge_splits(a.out + (size_t)row * a.C + (size_t)(first_head() + i) * hs, split_stats(a.scratch, th, n_splits, 0),
                 split_acc(a.scratch, th, n_splits, 0, hs), n_parts, hs, d);
  }
}
