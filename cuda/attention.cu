// op_kv_append: this step's keys and values into the caches.
// op_attention: causal attention of the T new queries over the cache, split over the key dimension in one
// launch: block (chunk, head, t) reduces one chunk of keys to partial (max, sum, acc) in scratch; the last
// block of each (t, head) to arrive merges the partials. The number of chunks depends on max_ctx only
// (positions are read from device memory), so one captured graph serves every context length.
#include <math.h>

#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kKvAppendThreads = 256;
constexpr int kAttnKeysPerChunk = 64;
constexpr int kAttnThreads = 128;
constexpr int kAttnMaxHeadSize = kAttnThreads;  // the value pass and the merge give each head dimension a thread
constexpr int kAttnLanesPerKey = kAttnThreads / kAttnKeysPerChunk;  // threads sharing one key's score
static_assert(kAttnLanesPerKey >= 1 && kWarpSize % kAttnLanesPerKey == 0, "a key's threads sit in one warp");
static_assert(kAttnMaxHeadSize % kVecWidth == 0, "q is staged as float4");
constexpr size_t kScratchAlignment = 16;

// ---- op_kv_append -------------------------------------------------------------------------------------------
// k_cache, v_cache: (max_ctx, C)  qkv: (T, 3C) as [q | k | v]
// grid: (T)  block: (kKvAppendThreads); row pos + t of each cache (skipped past max_ctx); n_vec4 float4, then floats.
__global__ void __launch_bounds__(kKvAppendThreads)
    kv_append_kernel(float* __restrict__ k_cache, float* __restrict__ v_cache, const float* __restrict__ qkv,
                     const int* __restrict__ state, int C, int max_ctx, int n_vec4) {
  const int row = state[STATE_POS] + blockIdx.x;
  if (row >= max_ctx) return;
  const float* k = qkv + (size_t)blockIdx.x * 3 * C + C;
  const float* v = k + C;
  float* k_dst = k_cache + (size_t)row * C;
  float* v_dst = v_cache + (size_t)row * C;
  for (int i = threadIdx.x; i < n_vec4; i += blockDim.x) {
    reinterpret_cast<float4*>(k_dst)[i] = __ldg(reinterpret_cast<const float4*>(k) + i);
    reinterpret_cast<float4*>(v_dst)[i] = __ldg(reinterpret_cast<const float4*>(v) + i);
  }
  for (int i = n_vec4 * kVecWidth + threadIdx.x; i < C; i += blockDim.x) {
    k_dst[i] = __ldg(k + i);
    v_dst[i] = __ldg(v + i);
  }
}

extern "C" void op_kv_append(float* k_cache, float* v_cache, const float* qkv, const int* state, int T, int C, int max_ctx) {
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

// One chunk of n_keys keys (>= 1) from key0 for one (query, head): scores into p, then the partial
// (max, sum, acc) into stats/acc. q4: the head's query (hs floats) pre-scaled in shared memory; k, v: cache
// columns of this head; vec: hs % 4 == 0 and the caches 16-byte aligned, so key rows go as float4.
__device__ void attend_chunk(float* stats, float* acc, const float4* q4, float* p, float* value_partial,
                             const float* __restrict__ k, const float* __restrict__ v, int key0, int n_keys, int C,
                             int hs, bool vec) {
  // scores: kAttnLanesPerKey adjacent threads per key, each taking every kAttnLanesPerKey-th element (float4)
  // of the row, so all of a thread's loads are independent and in flight together
  const int j = threadIdx.x / kAttnLanesPerKey;
  const int sub = threadIdx.x % kAttnLanesPerKey;
  float s = 0.0f;
  if (j < n_keys) {
    const float* key = k + (size_t)(key0 + j) * C;
    if (vec) {
#pragma unroll 4
      for (int i = sub; i < hs / kVecWidth; i += kAttnLanesPerKey) {
        const float4 a = q4[i], b = __ldg(reinterpret_cast<const float4*>(key) + i);
        s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
      }
    } else {
      const float* q = reinterpret_cast<const float*>(q4);
#pragma unroll 4
      for (int d = sub; d < hs; d += kAttnLanesPerKey) s += q[d] * __ldg(key + d);
    }
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
  // values: thread (part, d) sums keys part, part + parts, ... of dimension d (coalesced over d)
  const int parts = kAttnThreads / hs;
  const int d = threadIdx.x % hs;
  const int part = threadIdx.x / hs;
  if (part < parts) {
    float a = 0.0f;
#pragma unroll 8
    for (int i = part; i < n_keys; i += parts) a += p[i] * __ldg(v + (size_t)(key0 + i) * C + d);
    value_partial[threadIdx.x] = a;
  }
  __syncthreads();
  if (d == (int)threadIdx.x) {  // part 0
    float a = 0.0f;
    for (int i = 0; i < parts; i++) a += value_partial[i * hs + d];
    acc[d] = a;
  }
}

// Counts this block in; true in the last block of its (t, head) to arrive, which then resets the counter.
__device__ bool arrive_last(unsigned* counter, int n_chunks, bool* is_last) {
  __threadfence();  // this thread's partials are visible device-wide before the block is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    *is_last = atomicAdd(counter, 1u) + 1 == (unsigned)n_chunks;
    if (*is_last) *counter = 0;  // every block of this launch has counted; the next launch starts from zero
  }
  __syncthreads();
  if (*is_last) __threadfence();  // order the merge's reads after the other blocks' partials
  return *is_last;
}

// out: (hs) = sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) sum_c over the n_used chunks with keys.
// Partials are read with __ldcg (L2) since other blocks wrote them during this launch.
__device__ void merge_chunks(float* out, const float* stats, const float* acc, int n_used, int hs) {
  const int d = threadIdx.x;
  if (d >= hs) return;
  float m = -INFINITY;
  for (int c = 0; c < n_used; c++) m = fmaxf(m, __ldcg(stats + c * kStatsPerChunk + kStatMax));
  float sum = 0.0f, a = 0.0f;
  for (int c = 0; c < n_used; c++) {
    const float w = expf(__ldcg(stats + c * kStatsPerChunk + kStatMax) - m);
    sum += w * __ldcg(stats + c * kStatsPerChunk + kStatSum);
    a += w * __ldcg(acc + (size_t)c * hs + d);
  }
  out[d] = a / sum;
}

// out: (T, C)  qkv: (T, 3C) (q only)  k_cache, v_cache: (max_ctx, C); head h in columns [h * hs, (h + 1) * hs)
// grid: (n_chunks, n_head, T)  block: (kAttnThreads); block (c, h, t) takes keys [c * 64, (c + 1) * 64) of
// query t's visible keys, and does nothing but arrive when the chunk is past them (the merge reads only
// the chunks that hold keys, so such a block writes no partial).
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(float* __restrict__ out, AttnScratch scratch, const float* __restrict__ qkv,
                     const float* __restrict__ k_cache, const float* __restrict__ v_cache, const int* __restrict__ state,
                     int C, int n_head, int max_ctx, bool vec) {
  __shared__ float4 q4[kAttnMaxHeadSize / kVecWidth];
  __shared__ float p[kAttnKeysPerChunk];
  __shared__ float value_partial[kAttnThreads];
  __shared__ bool is_last;
  const int chunk = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int n_chunks = gridDim.x;
  const int hs = C / n_head;
  const int th = t * n_head + h;
  const int n_keys = visible_keys(state[STATE_POS], t, max_ctx);
  const int key0 = chunk * kAttnKeysPerChunk;
  float* stats = scratch.stats + ((size_t)th * n_chunks + chunk) * kStatsPerChunk;
  float* acc = scratch.acc + ((size_t)th * n_chunks + chunk) * hs;

  if (key0 < n_keys) {
    const float scale = 1.0f / sqrtf((float)hs);
    float* q = reinterpret_cast<float*>(q4);
    for (int d = threadIdx.x; d < hs; d += blockDim.x) q[d] = qkv[(size_t)t * 3 * C + h * hs + d] * scale;
    __syncthreads();
    attend_chunk(stats, acc, q4, p, value_partial, k_cache + h * hs, v_cache + h * hs, key0,
                 min(kAttnKeysPerChunk, n_keys - key0), C, hs, vec);
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

extern "C" void op_attention(float* out, float* scratch, const float* qkv, const float* k_cache, const float* v_cache,
                             const int* state, int T, int C, int n_head, int max_ctx) {
  if (n_head <= 0 || C % n_head != 0 || C / n_head > kAttnMaxHeadSize) {
    rt_fail(cudaErrorInvalidValue);
    return;
  }
  const int hs = C / n_head;
  const bool vec = hs % kVecWidth == 0 && aligned16(k_cache);
  LAUNCH(attention_kernel, dim3(attention_chunks(max_ctx), n_head, T), kAttnThreads, out,
         scratch_layout(scratch, T, C, n_head, max_ctx), qkv, k_cache, v_cache, state, C, n_head, max_ctx, vec);
}
