// CPU twins of attention.cu: append to the KV cache, then causal attention over it (no stored mask). The
// cache is stored as fp32, bf16 or f16: rows are rounded to nearest even as they are appended and widened to
// fp32 as they are read (decode: in the dot products' loads; many queries: a head's key block at a time, into
// a small buffer in L1).
//
// One query per sequence (decode): memory-bound, each cache is read once. Every sequence's keys are cut into
// ranges, handed to the threads a range or two at a time; a range reads its K rows, then its V rows (whole rows
// in order, or one K/V head's columns at a time where query heads share it, then with the rows in L2, prefetched
// while the core computes), and leaves each head's partial softmax (max, sum, weighted sum of V) in a slot of its
// own. Each sequence's slots are merged in range order afterwards, so its result does not depend on which thread
// ran which range, nor on the batch.
// Many queries (prefill, the uncached step): compute-bound, flash-attention style. A chunk owns one head
// and a block of queries; it walks the visible keys a block at a time, scores them with the micro-kernel
// (cpu_math.h), folds them into a running softmax per query, and adds P @ V with the micro-kernel again.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <type_traits>
#include <vector>

#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {
// dst[0:n] = src[0:n] in the cache's storage type (rounded to nearest even; cpu_math.h `narrow` says what
// becomes of values f16 cannot hold: ±Inf from 65520 up, NaN stays NaN)
template <typename S> void store_row(S* dst, const float* src, int n) {
  if constexpr (std::is_same_v<S, float>) {
    memcpy(dst, src, sizeof(float) * n);
  } else {
    for (int i = 0; i < n; i++) dst[i] = narrow_to<S>(src[i]);
  }
}
}  // namespace

// k_cache_b, v_cache_b: (max_ctx, kv_C) rows [pos_b, pos_b + T) = the k and v parts of qkv: (B·T, C + 2 kv_C)
extern "C" void op_kv_append(void* k_cache, void* v_cache, const float* qkv, const int* state, int B, int T, int C,
                             int kv_C, int max_ctx, int kvdtype) {
  OpTimer timer(OP_KV_APPEND);
  if (cpu_reject_unless(is_storage_type(kvdtype))) return;
  with_storage(kvdtype, [&](auto storage) {
    using S = typename decltype(storage)::type;
    for (int b = 0; b < B; b++) {
      const int pos = state[b * STATE_INTS + STATE_POS];
      S* k = static_cast<S*>(k_cache) + (size_t)b * max_ctx * kv_C;
      S* v = static_cast<S*>(v_cache) + (size_t)b * max_ctx * kv_C;
      for (int t = 0; t < T && pos + t < max_ctx; t++) {
        const float* row = qkv + ((size_t)b * T + t) * (C + 2 * kv_C);
        store_row(k + (size_t)(pos + t) * kv_C, row + C, kv_C);
        store_row(v + (size_t)(pos + t) * kv_C, row + C + kv_C, kv_C);
      }
    }
  });
}

extern "C" size_t op_attention_scratch_bytes(int, int, int, int, int) { return 0; }

namespace {
// The attention's shape: C = n_head·hs query (and output) columns; query head h reads K/V head h / group of cache
// rows of kv_C = n_kv_head·hs elements; a qkv row is [q (C) | k (kv_C) | v (kv_C)].
struct Heads {
  int C, n_head, hs, kv_C, group;
  Heads(int C, int n_head, int n_kv_head)
      : C(C), n_head(n_head), hs(C / n_head), kv_C(n_kv_head * (C / n_head)), group(n_head / n_kv_head) {}
  size_t qkv_row() const { return (size_t)C + 2 * (size_t)kv_C; }
  int kv_offset(int h) const { return h / group * hs; }
};

// One query: keys per range, by the sequence's keys, the cache's row size and the machine's L2 alone (so a
// sequence's sums do not depend on the batch or the threads): keys / kTargetRanges, kept within
// [kMinKeysPerRange, kMaxKeysPerRange]. Each range restarts the K and V streams and pays a softmax per head, so
// ranges stay long: at 8k keys 256-key ranges took 36% less time than 32-key ones (2026-12-03); at 1,000 keys
// 128-key ranges 5-15% less than 48-key ones (Llama-3.2-1B's 32/8 heads, SmolLM2-135M's 9/3; 2026-12-06, AMD
// EPYC VM, 2 threads), which leaves 8 ranges to share there. Where the range is worked on in L2 (query heads
// sharing K/V heads, below), its K and V rows and the next range's K rows prefetched beside them stay within the
// core's L2: K and V rows of at most kL2RangeShare of it, as sysconf reports it, within [kMinL2RangeBytes,
// kMaxL2RangeBytes], the sizes measured (Llama-3.2-1B's 2 KiB fp32 rows: 96 keys at 384 KiB). On the Zen 3 VM's
// 512 KiB L2, 384 KiB ranges overflowed it with the next range's K rows beside them: 192 KiB ones read
// SmolLM2-135M's caches (9/3 heads, 8,191 keys, 30 layers, 2 threads) 12% faster, Llama-3.2-1B's (32/8) 8%
// (2026-12-07).
constexpr int kMinKeysPerRange = 128, kMaxKeysPerRange = 256, kTargetRanges = 16;
constexpr double kL2RangeShare = 3.0 / 8;
constexpr size_t kMinL2RangeBytes = 192 << 10, kMaxL2RangeBytes = 384 << 10;
size_t l2_range_bytes() {
  static const size_t bytes = [] {
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);  // glibc's, from cpuid
#else
    const long l2 = 0;
#endif
    if (l2 <= 0) return kMaxL2RangeBytes;  // the 1 MiB L2 it was tuned on, where the C library cannot say
    return std::clamp((size_t)(l2 * kL2RangeShare), kMinL2RangeBytes, kMaxL2RangeBytes);
  }();
  return bytes;
}
int keys_per_range(int keys, size_t row_bytes, bool in_l2) {
  const int keys_for_ranges =
      std::clamp(keys / kTargetRanges / kVecFloats * kVecFloats, kMinKeysPerRange, kMaxKeysPerRange);
  if (!in_l2) return keys_for_ranges;
  return std::min(keys_for_ranges,
                  std::max(kVecFloats, (int)(l2_range_bytes() / (2 * row_bytes)) / kVecFloats * kVecFloats));
}
constexpr int kQueryBlock = 64;  // many queries: queries per chunk (a multiple of kTileCols)
constexpr int kKeyBlock = 64;    // many queries: keys scored at a time
static_assert(kQueryBlock % kTileCols == 0, "a query block is whole micro-tile panels (and whole vectors)");

// Keys that query t (absolute position pos + t) attends to: cache rows [0, visible_keys).
int visible_keys(int pos, int t, int max_ctx) {
#ifdef PLANT_BUG_MASK
  const int visible = pos + t + 2;  // planted for test/model-cpu.test.ts: one future key leaks through
#else
  const int visible = pos + t + 1;
#endif
  return visible < max_ctx ? visible : max_ctx;
}

// ---- One query per sequence (decode): split over key ranges --------------------------------------------------

// A head's softmax over one key range: slot = [max score, sum of e^(score - max), Σ e^(score - max) v (hs)].
int slot_floats(int hs) { return hs + 2; }

// q (n) · k (n), k widened as it is loaded
template <typename S> float dot_widened(const float* q, const S* k, int n) {
  vecf acc = {};
  int d = 0;
  for (; d + kVecFloats <= n; d += kVecFloats) acc += load_vec(q + d) * load_widened(k + d);
  float dot = sum_lanes(acc);
  for (; d < n; d++) dot += q[d] * widen(k[d]);
  return dot;
}

// acc (n) += p · v (n), v widened as it is loaded
template <typename S> void add_scaled_widened(float* acc, float p, const S* v, int n) {
  int d = 0;
  for (; d + kVecFloats <= n; d += kVecFloats) store_vec(acc + d, load_vec(acc + d) + splat(p) * load_widened(v + d));
  for (; d < n; d++) acc[d] += p * widen(v[d]);
}

// Each head's slot from its scores (n_head, n): the max, the exponentials (in place) and their sum; the weighted
// sum of V zeroed.
void range_softmax(float* slots, float* scores, int n, const Heads& heads) {
  const int hs = heads.hs;
  for (int h = 0; h < heads.n_head; h++) {
    float* s = scores + h * n;
    float* slot = slots + (size_t)h * slot_floats(hs);
    float max_score = -INFINITY;
#pragma omp simd reduction(max : max_score)
    for (int j = 0; j < n; j++) max_score = max_of(max_score, s[j]);
    vecf lanes_total = {};
    int j = 0;
    for (; j + kVecFloats <= n; j += kVecFloats) {
      const vecf e = exp_approx(load_vec(s + j) - splat(max_score));
      store_vec(s + j, e);
      lanes_total += e;
    }
    float total = sum_lanes(lanes_total);
    for (; j < n; j++) {
      s[j] = exp_approx(s[j] - max_score);
      total += s[j];
    }
    slot[0] = max_score;
    slot[1] = total;
    memset(slot + 2, 0, sizeof(float) * hs);
  }
}

// slots: (n_head, hs + 2) for keys [j0, j1)     scores: (n_head, j1 - j0) scratch     q: (C)
// Any head size. Each key row is read once from memory: its heads' dot products follow one another (a K/V
// head's query heads reuse its columns from L1).
template <typename S>
void attend_key_range_any(float* slots, float* scores, const float* q, const S* k_cache, const S* v_cache, int j0,
                          int j1, const Heads& heads, float scale) {
  const int n_head = heads.n_head, hs = heads.hs, n = j1 - j0;
  for (int j = 0; j < n; j++) {
    const S* k = k_cache + (size_t)(j0 + j) * heads.kv_C;
    for (int h = 0; h < n_head; h++) scores[h * n + j] = dot_widened(q + h * hs, k + heads.kv_offset(h), hs) * scale;
  }
  range_softmax(slots, scores, n, heads);
  for (int j = 0; j < n; j++) {
    const S* v = v_cache + (size_t)(j0 + j) * heads.kv_C;
    for (int h = 0; h < n_head; h++)
      add_scaled_widened(slots + (size_t)h * slot_floats(hs) + 2, scores[h * n + j], v + heads.kv_offset(h), hs);
  }
}

// ---- The vector paths: head sizes of Vecs vectors ----
//
// A (head, key) dot product leaves a vector of partial sums; kVecFloats of them are summed across lanes together
// (sum_lanes_each's tree: the result's lane i is the i-th product).
// Row order: the rows are read whole, in order, each query head's query reloaded from L1 for each key, and each
// row's V prefetched for the weighing pass.
// Shared heads: a K/V head's columns are loaded once into registers for all its query heads, whose queries (or
// weighted sums) stay in registers too with 32 of them (attend_key_range_shared; with 16, blocked:
// attend_key_range_blocked), and the range's rows are worked on in L2, prefetched while the core computes. This core
// issues one vector load a cycle, so loads, not multiplies, bound the row-order loops when heads share: Llama-3.2-1B's
// 32/8 heads scored at 294 cycles a key in L2, 3x the multiplies' time. Its column passes stream worse from DRAM than
// whole rows, and a range's memory time and its arithmetic's add up unless they overlap, hence the prefetching.
// op_attention alone, caches cold, 8,191 keys, f32, time shared ÷ row order, 1 / 2 threads (2026-12-06, AMD EPYC VM,
// both orders of an A/B in one process): 9/3 heads 0.86 / 0.90–0.96, 14/2 0.71 / 0.85, 15/5 0.84 / 0.93, 9/1 0.90 /
// 0.91; 9/9 1.27 / 1.16 (1.24 / 1.13 at 1,000 keys). Hence shared from groups of two.
constexpr int kSharedGroupMin = 2;
// 32 vector registers (AVX-512) hold a group's queries; with 16 the shared heads' sums are blocked instead
constexpr bool kGroupQueriesInRegisters = kVecFloats == 16;

// Keeps v in a register: without it the compiler folds v's load into every multiply that uses it.
inline void keep_in_register(vecf& v) {
#if defined(__x86_64__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// Rows a loop prefetches while it works on others: key j of the loop prefetches bytes [j, j + 1) · per_key from
// `from`, so the loop keeps no cursor (loops that advanced one ran 6-9% slower for SmolLM2-135M's 9/3 heads).
struct Prefetch {
  static constexpr size_t kLine = 64;
  const char* from = nullptr;
  size_t per_key = 0;  // a multiple of kLine
  // bytes over `visits` keys, per_key rounded up to whole lines: the last visits may prefetch past the rows
  // (which costs bandwidth, never a fault)
  static Prefetch spread(const void* rows, size_t bytes, long visits) {
    return {static_cast<const char*>(rows), visits > 0 ? (bytes + visits * kLine - 1) / (visits * kLine) * kLine : 0};
  }
  void keys(int j, int count) const {
    for (size_t b = j * per_key; b < (j + count) * per_key; b += kLine) __builtin_prefetch(from + b);
  }
  Prefetch after(int keys) const { return {from + keys * per_key, per_key}; }
};

// Loads every cache line of `bytes` from rows once, as a plain stream (the loads' sum is not used, but the
// volatile asm that takes it keeps the loop).
inline void touch_lines(const void* rows, size_t bytes) {
  const char* p = static_cast<const char*>(rows);
  vecf sum = {};
  for (size_t b = 0; b + sizeof(vecf) <= bytes; b += Prefetch::kLine)
    sum += load_vec(reinterpret_cast<const float*>(p + b));
#if defined(__x86_64__)
  asm volatile("" : : "v"(sum));
#else
  asm volatile("" : : "r"(&sum) : "memory");
#endif
}

// head (Vecs vectors) = the Vecs · kVecFloats elements from `from`, widened, each kept in a register
template <int Vecs, typename S> inline void load_head(vecf (&head)[Vecs], const S* from) {
#pragma GCC unroll 8
  for (int d = 0; d < Vecs; d++) {
    head[d] = load_widened(from + d * kVecFloats);
    keep_in_register(head[d]);
  }
}

// scores (n_head, n) for keys [0, n) of k (rows of kv_C), head size Vecs vectors. The rows are read in order,
// each whole (all heads' columns one after another, as the prefetcher streams them), kVecFloats keys at a time:
// each (head, key) dot product leaves a vector in `part`, and a head's kVecFloats of them are summed together
// (sum_lanes_each). The keys past the last whole group one by one. Each row's V is prefetched on the way, for the
// weighing pass.
template <typename S, int Vecs>
void score_keys(float* scores, vecf* part, const float* q, const S* k, const S* v, int n, const Heads& heads,
                float scale) {
  constexpr int kLine = 64, kPrefetchRows = kVecFloats;
  const size_t row_bytes = heads.kv_C * sizeof(S);
  int j = 0;
  const int kv_heads = heads.n_head / heads.group;
  for (; j + kVecFloats <= n; j += kVecFloats) {
    for (int i = 0; i < kVecFloats; i++) {
      const S* row = k + (size_t)(j + i) * heads.kv_C;
      const char* v_row = reinterpret_cast<const char*>(v + (size_t)(j + i) * heads.kv_C);
      const char* k_ahead = reinterpret_cast<const char*>(row + (size_t)kPrefetchRows * heads.kv_C);
      for (size_t b = 0; b < row_bytes; b += kLine) {
        __builtin_prefetch(v_row + b, 0, 2);
        if (j + i + kPrefetchRows < n) __builtin_prefetch(k_ahead + b);
      }
      for (int kv = 0; kv < kv_heads; kv++) {
        vecf key[Vecs];
#pragma GCC unroll 8
        for (int d = 0; d < Vecs; d++) key[d] = load_widened(row + kv * heads.hs + d * kVecFloats);
        for (int g = 0; g < heads.group; g++) {
          const int h = kv * heads.group + g;
          const float* query = q + h * heads.hs;
          vecf acc = load_vec(query) * key[0];
#pragma GCC unroll 8
          for (int d = 1; d < Vecs; d++) acc += load_vec(query + d * kVecFloats) * key[d];
          part[h * kVecFloats + i] = acc;
        }
      }
    }
    for (int h = 0; h < heads.n_head; h++) {
      vecf(&lanes)[kVecFloats] = *reinterpret_cast<vecf(*)[kVecFloats]>(part + h * kVecFloats);
      store_vec(scores + h * n + j, sum_lanes_each(lanes) * splat(scale));
    }
  }
  for (; j < n; j++)
    for (int h = 0; h < heads.n_head; h++)
      scores[h * n + j] =
          dot_widened(q + h * heads.hs, k + (size_t)j * heads.kv_C + heads.kv_offset(h), heads.hs) * scale;
}

// slot (hs + 2)'s weighted sum of V, for Heads_ consecutive query heads from h0, over keys [0, n) in order,
// the accumulators in registers.
template <int Heads_, int Vecs, typename S>
void weigh_values(float* slots, const float* scores, const S* v, int n, const Heads& heads, int h0) {
  vecf acc[Heads_][Vecs] = {};
  for (int j = 0; j < n; j++) {
    const S* row = v + (size_t)j * heads.kv_C;
#pragma GCC unroll 8
    for (int g = 0; g < Heads_; g++) {
      const vecf p = splat(scores[(h0 + g) * n + j]);
      const S* head_row = row + heads.kv_offset(h0 + g);
#pragma GCC unroll 8
      for (int d = 0; d < Vecs; d++) acc[g][d] += p * load_widened(head_row + d * kVecFloats);
    }
  }
  for (int g = 0; g < Heads_; g++)
    for (int d = 0; d < Vecs; d++)
      store_vec(slots + (size_t)(h0 + g) * slot_floats(heads.hs) + 2 + d * kVecFloats, acc[g][d]);
}

// weigh_values for any 1..Heads_ heads from h0
template <int Heads_, int Vecs, typename S>
void weigh_values_for(int count, float* slots, const float* scores, const S* v, int n, const Heads& heads, int h0) {
  if constexpr (Heads_ > 1) {
    if (count < Heads_) return weigh_values_for<Heads_ - 1, Vecs>(count, slots, scores, v, n, heads, h0);
  }
  weigh_values<Heads_, Vecs>(slots, scores, v, n, heads, h0);
}

// The key range's slots in row order: the scores kVecFloats keys at a time, then V weighed for as
// many heads at once as keep their accumulators in 16 vector registers.
template <typename S, int Vecs>
void attend_key_range_rows(float* slots, float* scores, const float* q, const S* k_cache, const S* v_cache, int j0,
                           int j1, const Heads& heads, float scale) {
  constexpr int kHeadsPerPass = 16 / Vecs > 0 ? 16 / Vecs : 1;
  const int n = j1 - j0;
  const S* k = k_cache + (size_t)j0 * heads.kv_C;
  const S* v = v_cache + (size_t)j0 * heads.kv_C;
  static thread_local std::vector<vecf> part;  // (n_head, kVecFloats) per thread
  part.resize((size_t)heads.n_head * kVecFloats);
  score_keys<S, Vecs>(scores, part.data(), q, k, v, n, heads, scale);
  range_softmax(slots, scores, n, heads);
  for (int h0 = 0; h0 < heads.n_head; h0 += kHeadsPerPass)
    weigh_values_for<kHeadsPerPass, Vecs>(std::min(kHeadsPerPass, heads.n_head - h0), slots, scores, v, n, heads, h0);
}

// scores (n_head, n) of query heads [h0, h0 + count) for keys [j, n) of head_k (a K/V head's columns, rows of kv_C),
// one dot product at a time: the keys past a shared path's last whole block of keys
template <typename S>
void score_keys_one_by_one(float* scores, const float* q, const S* head_k, int j, int n, const Heads& heads, int h0,
                           int count, float scale) {
  for (; j < n; j++)
    for (int g = 0; g < count; g++)
      scores[(size_t)(h0 + g) * n + j] =
          dot_widened(q + (size_t)(h0 + g) * heads.hs, head_k + (size_t)j * heads.kv_C, heads.hs) * scale;
}

// scores (n_head, n) of query heads [h0, h0 + count) (count <= Heads_) of K/V head kv, keys [0, n) of k (rows of
// kv_C): the Heads_ queries in registers, each key's columns loaded once for all of them; kVecFloats (key, head)
// dot products at a time are summed across lanes together (lane i·Heads_ + g: the group's key i, head h0 + g), the
// keys past the last whole group one by one.
template <int Heads_, int Vecs, typename S>
void score_shared(float* scores, const float* q, const S* k, int n, const Heads& heads, int kv, int h0, int count,
                  float scale, Prefetch ahead) {
  constexpr int kHalf = kVecFloats / 2, kKeysPerHalf = kHalf / Heads_, kKeys = 2 * kKeysPerHalf;
  static_assert(kKeysPerHalf * Heads_ == kHalf, "half of the lanes holds whole keys");
  vecf query[Heads_][Vecs];
  for (int g = 0; g < Heads_; g++) load_head(query[g], q + (size_t)(h0 + (g < count ? g : 0)) * heads.hs);
  const S* head_k = k + (size_t)kv * heads.hs;
  int j = 0;
  for (; j + kKeys <= n; j += kKeys) {
    vecf halves[2];
    for (int half = 0; half < 2; half++) {
      vecf leaf[kHalf];
#pragma GCC unroll 8
      for (int i = 0; i < kKeysPerHalf; i++) {
        const S* row = head_k + (size_t)(j + half * kKeysPerHalf + i) * heads.kv_C;
        vecf key[Vecs];
        load_head(key, row);
#pragma GCC unroll 8
        for (int g = 0; g < Heads_; g++) {
          vecf acc = query[g][0] * key[0];
#pragma GCC unroll 8
          for (int d = 1; d < Vecs; d++) acc += query[g][d] * key[d];
          leaf[i * Heads_ + g] = acc;
        }
      }
      halves[half] = sum_lanes_half(leaf);
    }
    alignas(64) float dots[kVecFloats];
    store_vec(dots, sum_lanes_halves(halves[0], halves[1]) * splat(scale));
#pragma GCC unroll 16
    for (int i = 0; i < kKeys; i++)
#pragma GCC unroll 8
      for (int g = 0; g < Heads_; g++)
        if (g < count) scores[(size_t)(h0 + g) * n + j + i] = dots[i * Heads_ + g];
    ahead.keys(j, kKeys);
  }
  score_keys_one_by_one(scores, q, head_k, j, n, heads, h0, count, scale);
}

// score_shared for count (1..Heads_) heads: the fewest lanes' worth of heads (1, 2, 4 ...) that hold them
template <int Heads_, int Vecs, typename S>
void score_shared_for(float* scores, const float* q, const S* k, int n, const Heads& heads, int kv, int h0, int count,
                      float scale, Prefetch ahead) {
  if constexpr (Heads_ > 1) {
    if (count <= Heads_ / 2)
      return score_shared_for<Heads_ / 2, Vecs>(scores, q, k, n, heads, kv, h0, count, scale, ahead);
  }
  score_shared<Heads_, Vecs>(scores, q, k, n, heads, kv, h0, count, scale, ahead);
}

// slots' weighted sums of V for query heads [h0, h0 + count) (count <= Heads_) of K/V head kv over keys [0, n) of
// v: the accumulators in registers, each row's columns loaded once for all of them.
template <int Heads_, int Vecs, typename S>
void weigh_shared(float* slots, const float* scores, const S* v, int n, const Heads& heads, int kv, int h0, int count,
                  Prefetch ahead) {
  vecf acc[Heads_][Vecs];
#pragma GCC unroll 8
  for (int g = 0; g < Heads_; g++)
#pragma GCC unroll 8
    for (int d = 0; d < Vecs; d++) acc[g][d] = vecf{};
  const S* head_v = v + (size_t)kv * heads.hs;
  for (int j = 0; j < n; j++) {
    ahead.keys(j, 1);
    const S* row = head_v + (size_t)j * heads.kv_C;
    vecf value[Vecs];
    load_head(value, row);
#pragma GCC unroll 8
    for (int g = 0; g < Heads_; g++) {
      const vecf weight = splat(scores[(size_t)(h0 + (g < count ? g : 0)) * n + j]);
#pragma GCC unroll 8
      for (int d = 0; d < Vecs; d++) acc[g][d] += weight * value[d];
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < Heads_; g++)
#pragma GCC unroll 8
    for (int d = 0; d < Vecs; d++)
      if (g < count) store_vec(slots + (size_t)(h0 + g) * slot_floats(heads.hs) + 2 + d * kVecFloats, acc[g][d]);
}

// weigh_shared for count (1..Heads_) heads, as score_shared_for
template <int Heads_, int Vecs, typename S>
void weigh_shared_for(float* slots, const float* scores, const S* v, int n, const Heads& heads, int kv, int h0,
                      int count, Prefetch ahead) {
  if constexpr (Heads_ > 1) {
    if (count <= Heads_ / 2)
      return weigh_shared_for<Heads_ / 2, Vecs>(slots, scores, v, n, heads, kv, h0, count, ahead);
  }
  weigh_shared<Heads_, Vecs>(slots, scores, v, n, heads, kv, h0, count, ahead);
}

// What a range's chunk prefetches around the range: whether the range before it in the chunk prefetched its K rows,
// and the K rows of the range after it (none after the chunk's last), for it to prefetch.
struct Ahead {
  bool k_prefetched = false;
  const void* next_k = nullptr;
  size_t next_k_bytes = 0;
};

// The key range's slots when query heads share K/V heads: one K/V head at a time over all the range's rows, its
// query heads kHeadsAtOnce at a time, the range's rows in L2. Its K rows come first as a plain stream (or were
// prefetched by the range before it), its V rows are prefetched while the K rows are scored, and the next range's
// K rows while the V rows are weighed, so that memory streams while the core computes.
template <typename S, int Vecs>
void attend_key_range_shared(float* slots, float* scores, const float* q, const S* k_cache, const S* v_cache, int j0,
                             int j1, const Heads& heads, float scale, const Ahead& ahead) {
  constexpr int kHeadsAtOnce = std::min(16 / Vecs, kVecFloats / 2);
  const int n = j1 - j0, kv_heads = heads.n_head / heads.group;
  const S* k = k_cache + (size_t)j0 * heads.kv_C;
  const S* v = v_cache + (size_t)j0 * heads.kv_C;
  const size_t bytes = (size_t)n * heads.kv_C * sizeof(S);
  const long keys_visited = (long)kv_heads * ((heads.group + kHeadsAtOnce - 1) / kHeadsAtOnce) * n;  // by the passes
  if (!ahead.k_prefetched) touch_lines(k, bytes);
  Prefetch v_ahead = Prefetch::spread(v, bytes, keys_visited);
  for (int kv = 0; kv < kv_heads; kv++)
    for (int h0 = kv * heads.group; h0 < (kv + 1) * heads.group; h0 += kHeadsAtOnce, v_ahead = v_ahead.after(n))
      score_shared_for<kHeadsAtOnce, Vecs>(scores, q, k, n, heads, kv, h0,
                                           std::min(kHeadsAtOnce, (kv + 1) * heads.group - h0), scale, v_ahead);
  range_softmax(slots, scores, n, heads);
  Prefetch next_k_ahead = Prefetch::spread(ahead.next_k, ahead.next_k_bytes, keys_visited);
  for (int kv = 0; kv < kv_heads; kv++)
    for (int h0 = kv * heads.group; h0 < (kv + 1) * heads.group;
         h0 += kHeadsAtOnce, next_k_ahead = next_k_ahead.after(n))
      weigh_shared_for<kHeadsAtOnce, Vecs>(slots, scores, v, n, heads, kv, h0,
                                           std::min(kHeadsAtOnce, (kv + 1) * heads.group - h0), next_k_ahead);
}

// ---- Shared heads with 16 vector registers (AVX, SSE) ----
//
// A group's queries do not fit in 16 registers: two heads of 8 vectors filled them on AVX, and the compiler spilled
// the weighed sums to the stack every key. So the dot products are blocked over keys and heads instead, each
// operand loaded as the sums need it. A whole block's dot product is the same sum as score_shared's (the same
// products in the same order, the same lane tree), and each weighed sum adds the same terms in the same order as
// weigh_shared; the keys past a range's last whole block take dot_widened as before, but the blocks are smaller
// (2 keys with 3 or 4 heads, where score_shared took 4 or 8), so where a range's keys are not a multiple of 8 a few
// of them are summed another way (another lane tree: differences up to ~1e-6). Zen 3 VM (AVX2), op_attention of two
// builds alternated in one process, one thread, one range's rows in L2, ns a key, register-resident → blocked:
// 32/8 heads ~500 → ~310, 9/3 ~116 → ~104, and 16/8 heads of 128 (the plain loop before) ~870 → ~605; from DRAM on
// two threads (8,191 keys, 16 or 60 layers): 32/8 10.4 → 11.6 GB/s, 9/3 11.3 → 12.0 (2026-12-08).

// Keys scored at a time with `heads` heads: their dot products fill the kVecFloats vectors summed together.
constexpr int keys_per_block(int heads) { return kVecFloats / (int)std::bit_ceil((unsigned)heads); }
// Vectors of a head's columns weighed at a time with `heads` heads: as many as a block has keys, so that their
// accumulators fill the same kVecFloats registers (fewer where the head has fewer vectors).
constexpr int columns_per_pass(int heads, int vecs) { return std::min(vecs, keys_per_block(heads)); }

// scores (n_head, n) of query heads [h0, h0 + Heads_) of K/V head kv, keys [0, n) of k (rows of kv_C):
// keys_per_block(Heads_) keys × Heads_ heads' dot products at a time, each in its own accumulator (lane
// i·Heads_ + g of the lane sums: the block's key i, head h0 + g), the keys past the last whole block one by one.
template <int Heads_, int Vecs, typename S>
void score_blocked(float* scores, const float* q, const S* k, int n, const Heads& heads, int kv, int h0, float scale,
                   Prefetch ahead) {
  constexpr int kKeys = keys_per_block(Heads_);
  const float* query = q + (size_t)h0 * heads.hs;
  const S* head_k = k + (size_t)kv * heads.hs;
  int j = 0;
  for (; j + kKeys <= n; j += kKeys) {
    vecf leaf[kVecFloats] = {};
#pragma GCC unroll 16
    for (int d = 0; d < Vecs; d++) {
      vecf key[kKeys];
#pragma GCC unroll 8
      for (int i = 0; i < kKeys; i++) key[i] = load_widened(head_k + (size_t)(j + i) * heads.kv_C + d * kVecFloats);
#pragma GCC unroll 4
      for (int g = 0; g < Heads_; g++) {
        const vecf query_part = load_vec(query + (size_t)g * heads.hs + d * kVecFloats);
#pragma GCC unroll 8
        for (int i = 0; i < kKeys; i++)
          leaf[i * Heads_ + g] = d == 0 ? query_part * key[i] : leaf[i * Heads_ + g] + query_part * key[i];
      }
    }
    alignas(64) float dots[kVecFloats];
    store_vec(dots, sum_lanes_each(leaf) * splat(scale));
#pragma GCC unroll 8
    for (int i = 0; i < kKeys; i++)
#pragma GCC unroll 4
      for (int g = 0; g < Heads_; g++) scores[(size_t)(h0 + g) * n + j + i] = dots[i * Heads_ + g];
    ahead.keys(j, kKeys);
  }
  score_keys_one_by_one(scores, q, head_k, j, n, heads, h0, Heads_, scale);
}

// slots' weighted sums of V for query heads [h0, h0 + Heads_) of K/V head kv over keys [0, n) of v:
// columns_per_pass(Heads_, Vecs) vectors of the head's columns at a time, their accumulators in registers.
template <int Heads_, int Vecs, typename S>
void weigh_blocked(float* slots, const float* scores, const S* v, int n, const Heads& heads, int kv, int h0,
                   Prefetch& ahead) {
  constexpr int kColumns = columns_per_pass(Heads_, Vecs);
  const S* head_v = v + (size_t)kv * heads.hs;
  for (int c = 0; c < Vecs; c += kColumns, ahead = ahead.after(n)) {
    vecf acc[Heads_][kColumns] = {};
    for (int j = 0; j < n; j++) {
      ahead.keys(j, 1);
      const S* row = head_v + (size_t)j * heads.kv_C + c * kVecFloats;
#pragma GCC unroll 4
      for (int g = 0; g < Heads_; g++) {
        const vecf weight = splat(scores[(size_t)(h0 + g) * n + j]);
#pragma GCC unroll 8
        for (int d = 0; d < kColumns; d++) acc[g][d] += weight * load_widened(row + d * kVecFloats);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < Heads_; g++)
#pragma GCC unroll 8
      for (int d = 0; d < kColumns; d++)
        store_vec(slots + (size_t)(h0 + g) * slot_floats(heads.hs) + 2 + (c + d) * kVecFloats, acc[g][d]);
  }
}

// fn(std::integral_constant<int, count>) for count in 1..Max
constexpr int kHeadsBlocked = kVecFloats / 2;
template <int Max = kHeadsBlocked, typename Fn> void with_head_count(int count, const Fn& fn) {
  if constexpr (Max > 1) {
    if (count < Max) return with_head_count<Max - 1>(count, fn);
  }
  fn(std::integral_constant<int, Max>{});
}

// attend_key_range_shared's work, blocked: a K/V head's query heads kHeadsBlocked at a time, each pass's prefetches
// spread over the keys it visits.
template <typename S, int Vecs>
void attend_key_range_blocked(float* slots, float* scores, const float* q, const S* k_cache, const S* v_cache, int j0,
                              int j1, const Heads& heads, float scale, const Ahead& ahead) {
  const int n = j1 - j0, kv_heads = heads.n_head / heads.group;
  const S* k = k_cache + (size_t)j0 * heads.kv_C;
  const S* v = v_cache + (size_t)j0 * heads.kv_C;
  const size_t bytes = (size_t)n * heads.kv_C * sizeof(S);
  long score_passes = 0, weigh_passes = 0;  // over the range's keys, per K/V head
  for (int h = 0; h < heads.group; h += kHeadsBlocked) {
    score_passes++;
    weigh_passes += Vecs / columns_per_pass(std::min(kHeadsBlocked, heads.group - h), Vecs);
  }
  if (!ahead.k_prefetched) touch_lines(k, bytes);
  Prefetch v_ahead = Prefetch::spread(v, bytes, kv_heads * score_passes * n);
  for (int kv = 0; kv < kv_heads; kv++)
    for (int h0 = kv * heads.group; h0 < (kv + 1) * heads.group; h0 += kHeadsBlocked, v_ahead = v_ahead.after(n))
      with_head_count(std::min(kHeadsBlocked, (kv + 1) * heads.group - h0), [&](auto count) {
        score_blocked<decltype(count)::value, Vecs>(scores, q, k, n, heads, kv, h0, scale, v_ahead);
      });
  range_softmax(slots, scores, n, heads);
  Prefetch next_k_ahead = Prefetch::spread(ahead.next_k, ahead.next_k_bytes, kv_heads * weigh_passes * n);
  for (int kv = 0; kv < kv_heads; kv++)
    for (int h0 = kv * heads.group; h0 < (kv + 1) * heads.group; h0 += kHeadsBlocked)
      with_head_count(std::min(kHeadsBlocked, (kv + 1) * heads.group - h0), [&](auto count) {
        weigh_blocked<decltype(count)::value, Vecs>(slots, scores, v, n, heads, kv, h0, next_k_ahead);
      });
}

// The key range's slots: head sizes of 4 or 8 vectors (64 and 128 with AVX-512) take a vector path, the shared
// heads' one where shared_heads_path; with the sums blocked, 16 vectors (128 with AVX) take it too.
constexpr int kBlockedOnlyVecs = kGroupQueriesInRegisters ? 0 : 16;
bool shared_heads_path(const Heads& heads) {
  return (heads.hs == 4 * kVecFloats || heads.hs == 8 * kVecFloats ||
          (kBlockedOnlyVecs > 0 && heads.hs == kBlockedOnlyVecs * kVecFloats)) &&
         heads.group >= kSharedGroupMin;
}
template <typename S>
void attend_key_range(float* slots, float* scores, const float* q, const S* k_cache, const S* v_cache, int j0, int j1,
                      const Heads& heads, float scale, const Ahead& ahead) {
  const auto vectors = [&](auto vecs) {
    constexpr int Vecs = decltype(vecs)::value;
    if (shared_heads_path(heads)) {
      if constexpr (kGroupQueriesInRegisters)
        return attend_key_range_shared<S, Vecs>(slots, scores, q, k_cache, v_cache, j0, j1, heads, scale, ahead);
      return attend_key_range_blocked<S, Vecs>(slots, scores, q, k_cache, v_cache, j0, j1, heads, scale, ahead);
    }
    attend_key_range_rows<S, Vecs>(slots, scores, q, k_cache, v_cache, j0, j1, heads, scale);
  };
  if (heads.hs == 4 * kVecFloats) return vectors(std::integral_constant<int, 4>{});
  if (heads.hs == 8 * kVecFloats) return vectors(std::integral_constant<int, 8>{});
  if constexpr (kBlockedOnlyVecs > 0) {
    if (shared_heads_path(heads))
      return attend_key_range_blocked<S, kBlockedOnlyVecs>(slots, scores, q, k_cache, v_cache, j0, j1, heads, scale,
                                                           ahead);
  }
  attend_key_range_any(slots, scores, q, k_cache, v_cache, j0, j1, heads, scale);
}

// out: (C) = the ranges' slots merged, range by range, with the usual rescaling to a common max.
void merge_ranges(float* out, const float* slots, int ranges, int C, int n_head) {
  const int hs = C / n_head;
  const size_t range_floats = (size_t)n_head * slot_floats(hs);
  for (int h = 0; h < n_head; h++) {
    float max_score = -INFINITY;
    for (int r = 0; r < ranges; r++) max_score = max_of(max_score, slots[r * range_floats + h * slot_floats(hs)]);
    float* y = out + h * hs;
    float total = 0.0f;
    memset(y, 0, sizeof(float) * hs);
    for (int r = 0; r < ranges; r++) {
      const float* slot = slots + r * range_floats + h * slot_floats(hs);
      const float weight = expf(slot[0] - max_score);
      total += weight * slot[1];
#pragma omp simd
      for (int d = 0; d < hs; d++) y[d] += weight * slot[2 + d];
    }
    const float inv = 1.0f / total;
#pragma omp simd
    for (int d = 0; d < hs; d++) y[d] *= inv;
  }
}

// out: (B, C); sequence b's one query (row b of qkv) over its cache rows [0, pos_b]. The key ranges of every
// sequence are one list of chunks, shared by the threads; each sequence's slots are merged in range order
// afterwards, so a sequence's result depends neither on the threads nor on the other sequences.
template <typename S>
void attend_one_query_each(float* out, const float* qkv, const S* k_cache, const S* v_cache, const int* state, int B,
                           const Heads& heads, int max_ctx) {
  const int C = heads.C, n_head = heads.n_head, hs = heads.hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t range_floats = (size_t)n_head * slot_floats(hs);
  static thread_local std::vector<int> first_range, keys, range_keys;  // (B + 1), (B) and (B)
  first_range.assign(B + 1, 0);
  keys.resize(B);
  range_keys.resize(B);
  long work = 0;
  for (int b = 0; b < B; b++) {
    keys[b] = visible_keys(state[b * STATE_INTS + STATE_POS], 0, max_ctx);
    range_keys[b] = keys_per_range(keys[b], heads.kv_C * sizeof(S), shared_heads_path(heads));
    first_range[b + 1] = first_range[b] + (keys[b] + range_keys[b] - 1) / range_keys[b];
    work += (long)keys[b] * 2 * heads.kv_C;
  }
  static thread_local std::vector<float> slots;  // (ranges of every sequence, n_head, hs + 2), reused across calls
  slots.resize(range_floats * first_range[B]);
  float* all = slots.data();
  const int* firsts = first_range.data();
  const int* visible = keys.data();
  const int* per_range = range_keys.data();
  // range r's sequence, its first key and its keys
  const auto place = [&](long r) {
    const int b = (int)(std::upper_bound(firsts, firsts + B + 1, (int)r) - firsts) - 1;
    const int j0 = ((int)r - firsts[b]) * per_range[b];
    return std::array<int, 3>{b, j0, std::min(visible[b], j0 + per_range[b]) - j0};
  };
  // two ranges a chunk where there are enough for every thread, so that one prefetches the other's keys
  const long grain = first_range[B] >= 4L * cpu_threads() ? 2 : 1;
  parallel_range(first_range[B], grain, work, [&](long r0, long r1) {
    static thread_local std::vector<float> scores;  // (n_head, kMaxKeysPerRange) per thread
    scores.resize((size_t)n_head * kMaxKeysPerRange);
    for (long r = r0; r < r1; r++) {
      const auto [b, j0, n] = place(r);
      Ahead ahead{.k_prefetched = r > r0};
      if (r + 1 < r1) {
        const auto [next_b, next_j0, next_n] = place(r + 1);
        ahead.next_k = k_cache + ((size_t)next_b * max_ctx + next_j0) * heads.kv_C;
        ahead.next_k_bytes = (size_t)next_n * heads.kv_C * sizeof(S);
      }
      const size_t cache_offset = (size_t)b * max_ctx * heads.kv_C;
      attend_key_range(all + range_floats * r, scores.data(), qkv + (size_t)b * heads.qkv_row(), k_cache + cache_offset,
                       v_cache + cache_offset, j0, j0 + n, heads, scale, ahead);
    }
  });
  for (int b = 0; b < B; b++)
    merge_ranges(out + (size_t)b * C, all + range_floats * firsts[b], firsts[b + 1] - firsts[b], C, n_head);
}

// ---- Many queries: one head × a block of queries -----------------------------------------------------------
//
// Transposed, so that nothing is repacked per key block and the softmax runs along contiguous queries:
//   scores^T (n keys, queries) = K[keys, head] (n, hs) @ q^T (hs, queries)    K rows as they lie in the cache
//   acc^T (hs, queries)       += V[keys, head]^T (hs, n) @ p^T (n, queries)   V read down its columns

// The per-thread buffers of one (head, query block) chunk.
struct QueryBlockScratch {
  std::vector<float> q_t;        // (hs, kQueryBlock): the block's queries, transposed; zero past the last
  std::vector<float> scores_t;   // (kKeyBlock, kQueryBlock): scores, then probabilities, transposed
  std::vector<float> acc_t;      // (hs, kQueryBlock): Σ p v, unnormalised, transposed
  std::vector<float> max_score;  // (kQueryBlock) running max of each query's scaled scores
  std::vector<float> total;      // (kQueryBlock) running Σ e^(score - max)
  std::vector<float> rescale;    // (kQueryBlock) e^(old max - new max) of the current key block
  std::vector<int> visible;      // (kQueryBlock) keys each query sees (0 past the block's last query)
  std::vector<float> k_block;    // (kKeyBlock, hs): a key block of the head's K columns, widened (bf16/f16 caches)
  std::vector<float> v_block;    // (kKeyBlock, hs): the same of V
  void reset(int hs) {
    q_t.assign((size_t)hs * kQueryBlock, 0.0f);
    scores_t.resize((size_t)kKeyBlock * kQueryBlock);
    acc_t.assign((size_t)hs * kQueryBlock, 0.0f);
    max_score.assign(kQueryBlock, -INFINITY);
    total.assign(kQueryBlock, 0.0f);
    rescale.resize(kQueryBlock);
    visible.assign(kQueryBlock, 0);
    k_block.resize((size_t)kKeyBlock * hs);
    v_block.resize((size_t)kKeyBlock * hs);
  }
};

// n rows of one head's hs columns (row stride kv_C in the cache) as fp32 rows: the cache itself when it is fp32,
// else widened into block (row stride hs).
struct HeadRows {
  const float* data;
  size_t row_stride;
};
HeadRows head_rows(const float* rows, int, int kv_C, int, float*) { return {rows, (size_t)kv_C}; }
template <typename S> HeadRows head_rows(const S* rows, int n, int kv_C, int hs, float* block) {
  for (int j = 0; j < n; j++) widen_into(block + (size_t)j * hs, rows + (size_t)j * kv_C, hs);
  return {block, (size_t)hs};
}

// Folds n keys' scores (starting at key kb0) into every query's running softmax: masked scores are -inf,
// probabilities e^(s · scale - new max) (0 where masked) replace them, and total and acc_t are rescaled.
void fold_scores(QueryBlockScratch& w, int n, int kb0, int hs, float scale) {
  float* s = w.scores_t.data();
  const int* visible = w.visible.data();
  alignas(64) float block_max[kQueryBlock];
  for (int q = 0; q < kQueryBlock; q++) block_max[q] = -INFINITY;
  for (int j = 0; j < n; j++) {
    float* row = s + (size_t)j * kQueryBlock;
#pragma omp simd
    for (int q = 0; q < kQueryBlock; q++) {
      row[q] = kb0 + j < visible[q] ? row[q] * scale : -INFINITY;
      block_max[q] = max_of(block_max[q], row[q]);
    }
  }
  float* max_score = w.max_score.data();
  float* rescale = w.rescale.data();
  // exp_approx a vector at a time (its loops must be), the masked lanes chosen after it
  for (int q = 0; q < kQueryBlock; q += kVecFloats) {
    const vecf old_max = load_vec(max_score + q), new_max = max_of(old_max, load_vec(block_max + q));
    // e^-inf: 0 on the first keys
    store_vec(rescale + q, old_max == new_max ? splat(1.0f) : exp_approx(old_max - new_max));
    store_vec(max_score + q, new_max);
  }
  alignas(64) float block_total[kQueryBlock] = {};
  for (int j = 0; j < n; j++) {
    float* row = s + (size_t)j * kQueryBlock;
    for (int q = 0; q < kQueryBlock; q += kVecFloats) {
      const vecf score = load_vec(row + q);
      const vecf p = score == splat(-INFINITY) ? vecf{} : exp_approx(score - load_vec(max_score + q));
      store_vec(row + q, p);
      store_vec(block_total + q, load_vec(block_total + q) + p);
    }
  }
  float* total = w.total.data();
#pragma omp simd
  for (int q = 0; q < kQueryBlock; q++) total[q] = total[q] * rescale[q] + block_total[q];
  for (int d = 0; d < hs; d++) {
    float* acc = w.acc_t.data() + (size_t)d * kQueryBlock;
#pragma omp simd
    for (int q = 0; q < kQueryBlock; q++) acc[q] *= rescale[q];
  }
}

// out rows [t0, t1) (at most kQueryBlock), head h: queries from qkv (T, C + 2 kv_C) against cache rows
// [0, visible_keys(t1 - 1)).
template <typename S>
void attend_query_block(float* out, const float* qkv, const S* k_cache, const S* v_cache, int pos, int t0, int t1,
                        int h, const Heads& heads, int max_ctx) {
  const int C = heads.C, hs = heads.hs, queries = t1 - t0;
  const float scale = 1.0f / sqrtf((float)hs);
  static thread_local QueryBlockScratch w;
  w.reset(hs);
  for (int q = 0; q < queries; q++) {
    const float* row = qkv + (size_t)(t0 + q) * heads.qkv_row() + h * hs;
    for (int d = 0; d < hs; d++) w.q_t[(size_t)d * kQueryBlock + q] = row[d];
    w.visible[q] = visible_keys(pos, t0 + q, max_ctx);
  }
  const int keys = visible_keys(pos, t1 - 1, max_ctx);
  const S* k_head = k_cache + heads.kv_offset(h);
  const S* v_head = v_cache + heads.kv_offset(h);
  for (int kb0 = 0; kb0 < keys; kb0 += kKeyBlock) {
    const int n = std::min(kKeyBlock, keys - kb0);
    const HeadRows k = head_rows(k_head + (size_t)kb0 * heads.kv_C, n, heads.kv_C, hs, w.k_block.data());
    const HeadRows v = head_rows(v_head + (size_t)kb0 * heads.kv_C, n, heads.kv_C, hs, w.v_block.data());
    const StridedA k_rows{k.data, k.row_stride, 1};  // (n, hs)
    const StridedA v_cols{v.data, 1, v.row_stride};  // (hs, n)
    for (int panel = 0; panel < kQueryBlock; panel += kTileCols)
      for (int r0 = 0; r0 < n; r0 += kTileRows)
        tile_multiply_rows(std::min(kTileRows, n - r0), hs, k_rows.rows_from(r0), w.q_t.data() + panel, kQueryBlock,
                           w.scores_t.data() + (size_t)r0 * kQueryBlock + panel, kQueryBlock, TileOut::kStore, nullptr);
    fold_scores(w, n, kb0, hs, scale);
    for (int panel = 0; panel < kQueryBlock; panel += kTileCols)
      for (int r0 = 0; r0 < hs; r0 += kTileRows)
        tile_multiply_rows(std::min(kTileRows, hs - r0), n, v_cols.rows_from(r0), w.scores_t.data() + panel,
                           kQueryBlock, w.acc_t.data() + (size_t)r0 * kQueryBlock + panel, kQueryBlock, TileOut::kAdd,
                           nullptr);
  }
  for (int q = 0; q < queries; q++) {
    float* y = out + (size_t)(t0 + q) * C + h * hs;
    const float inv = 1.0f / w.total[q];
    for (int d = 0; d < hs; d++) y[d] = w.acc_t[(size_t)d * kQueryBlock + q] * inv;
  }
}

// One sequence: out (T, C); query t (absolute position pos + t) attends to cache rows [0, pos + t]
template <typename S>
void attend_sequence(float* out, const float* qkv, const S* k_cache, const S* v_cache, int pos, int T,
                     const Heads& heads, int max_ctx) {
  const int C = heads.C, n_head = heads.n_head;
  // chunks head by head, so that a head's K and V columns stay in L2 across its query blocks; within a
  // head the last block (most keys) first, so that the op ends on the cheapest chunks
  const int blocks = (T + kQueryBlock - 1) / kQueryBlock;
  const long work = (long)C * ((long)T * pos + (long)T * T / 2);
  parallel_range((long)blocks * n_head, 1, work, [&](long c0, long c1) {
    for (long c = c0; c < c1; c++) {
      const int h = (int)(c / blocks), block = blocks - 1 - (int)(c % blocks);
      const int t0 = block * kQueryBlock;
      attend_query_block(out, qkv, k_cache, v_cache, pos, t0, std::min(T, t0 + kQueryBlock), h, heads, max_ctx);
    }
  });
}

}  // namespace

// out: (B·T, C); sequence b's query t (absolute position pos_b + t) attends to its cache rows [0, pos_b + t]
extern "C" void op_attention(float* out, float*, const float* qkv, const void* k_cache, const void* v_cache,
                             const int* state, int B, int T, int C, int n_head, int n_kv_head, int max_ctx,
                             int kvdtype) {
  OpTimer timer(OP_ATTENTION);
  const bool heads_fit = n_head > 0 && C % n_head == 0 && n_kv_head > 0 && n_head % n_kv_head == 0;
  if (cpu_reject_unless(is_storage_type(kvdtype) && heads_fit)) return;
  const Heads heads(C, n_head, n_kv_head);
  with_storage(kvdtype, [&](auto storage) {
    using S = typename decltype(storage)::type;
    const S* k = static_cast<const S*>(k_cache);
    const S* v = static_cast<const S*>(v_cache);
    if (T == 1) return attend_one_query_each(out, qkv, k, v, state, B, heads, max_ctx);
    for (int b = 0; b < B; b++) {
      const size_t cache_offset = (size_t)b * max_ctx * heads.kv_C, row0 = (size_t)b * T;
      attend_sequence(out + row0 * C, qkv + row0 * heads.qkv_row(), k + cache_offset, v + cache_offset,
                      state[b * STATE_INTS + STATE_POS], T, heads, max_ctx);
    }
  });
}
