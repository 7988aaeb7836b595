// CPU twins of attention.cu: append to the KV cache, then causal attention over it (no stored mask).
//
// One query (decode): memory-bound, the cache is read once. The keys are cut into ranges; a range's chunk
// reads its K rows, then its V rows, contiguously for all heads, and leaves each head's partial softmax
// (max, sum, weighted sum of V) in a slot of its own. The slots are merged in range order afterwards, so the
// result does not depend on which thread ran which range.
// Many queries (prefill, the uncached step): compute-bound, flash-attention style. A chunk owns one head
// and a block of queries; it walks the visible keys a block at a time, scores them with the micro-kernel
// (cpu_math.h) against the block's keys packed transposed, folds them into a running softmax per query,
// and adds P @ V with the micro-kernel again.
#include <math.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

// k_cache, v_cache: (max_ctx, C) rows [pos, pos + T) = the k and v parts of qkv: (T, 3C)
extern "C" void op_kv_append(float* k_cache, float* v_cache, const float* qkv, const int* state, int T, int C, int max_ctx) {
  OpTimer timer(OP_KV_APPEND);
  const int pos = state[STATE_POS];
  for (int t = 0; t < T && pos + t < max_ctx; t++) {
    const float* row = qkv + (size_t)t * 3 * C;
    memcpy(k_cache + (size_t)(pos + t) * C, row + C, sizeof(float) * C);
    memcpy(v_cache + (size_t)(pos + t) * C, row + 2 * C, sizeof(float) * C);
  }
}

extern "C" size_t op_attention_scratch_bytes(int, int, int, int) { return 0; }

namespace {

constexpr int kKeysPerRange = 32;                 // one query: 192 KB of K and V rows per chunk at C = 768
constexpr int kQueryBlock = 8 * kTileRows;        // many queries: query rows per chunk
constexpr int kKeyBlock = 64;                     // many queries: keys scored at a time (a multiple of kTileCols)
static_assert(kKeyBlock % kTileCols == 0, "key blocks are whole micro-tile panels");

// Keys that query t (absolute position pos + t) attends to: cache rows [0, visible_keys).
int visible_keys(int pos, int t, int max_ctx) {
#ifdef PLANT_BUG_MASK
  const int visible = pos + t + 2;  // planted for test/model-cpu.test.ts: one future key leaks through
#else
  const int visible = pos + t + 1;
#endif
  return visible < max_ctx ? visible : max_ctx;
}

// ---- One query: split over key ranges ---------------------------------------------------------------------

// A head's softmax over one key range: slot = [max score, sum of e^(score - max), Σ e^(score - max) v (hs)].
int slot_floats(int hs) { return hs + 2; }

// slots: (n_head, hs + 2) for keys [j0, j1)     scores: (n_head, j1 - j0) scratch     q: (C)
void attend_key_range(float* slots, float* scores, const float* q, const float* k_cache, const float* v_cache, int j0,
                      int j1, int C, int n_head, float scale) {
  const int hs = C / n_head, n = j1 - j0;
  for (int j = 0; j < n; j++) {
    const float* k = k_cache + (size_t)(j0 + j) * C;
    for (int h = 0; h < n_head; h++) {
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hs; d++) dot += q[h * hs + d] * k[h * hs + d];
      scores[h * n + j] = dot * scale;
    }
  }
  for (int h = 0; h < n_head; h++) {
    float* s = scores + h * n;
    float* slot = slots + (size_t)h * slot_floats(hs);
    float max_score = -INFINITY;
    for (int j = 0; j < n; j++) max_score = fmaxf(max_score, s[j]);
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (int j = 0; j < n; j++) {
      s[j] = exp_approx(s[j] - max_score);
      total += s[j];
    }
    slot[0] = max_score;
    slot[1] = total;
    memset(slot + 2, 0, sizeof(float) * hs);
  }
  for (int j = 0; j < n; j++) {
    const float* v = v_cache + (size_t)(j0 + j) * C;
    for (int h = 0; h < n_head; h++) {
      const float p = scores[h * n + j];
      float* acc = slots + (size_t)h * slot_floats(hs) + 2;
#pragma omp simd
      for (int d = 0; d < hs; d++) acc[d] += p * v[h * hs + d];
    }
  }
}

// out: (C) = the ranges' slots merged, range by range, with the usual rescaling to a common max.
void merge_ranges(float* out, const float* slots, int ranges, int C, int n_head) {
  const int hs = C / n_head;
  const size_t range_floats = (size_t)n_head * slot_floats(hs);
  for (int h = 0; h < n_head; h++) {
    float max_score = -INFINITY;
    for (int r = 0; r < ranges; r++) max_score = fmaxf(max_score, slots[r * range_floats + h * slot_floats(hs)]);
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

// out: (C) for one query q: (C) over cache rows [0, keys)
void attend_one_query(float* out, const float* q, const float* k_cache, const float* v_cache, int keys, int C, int n_head) {
  const int hs = C / n_head;
  const float scale = 1.0f / sqrtf((float)hs);
  const int ranges = (keys + kKeysPerRange - 1) / kKeysPerRange;
  const size_t range_floats = (size_t)n_head * slot_floats(hs);
  static thread_local std::vector<float> slots;  // (ranges, n_head, hs + 2), reused across calls
  slots.resize(range_floats * ranges);
  float* all = slots.data();
  parallel_range(ranges, 1, (long)keys * C, [&](long r0, long r1) {
    static thread_local std::vector<float> scores;  // (n_head, kKeysPerRange) per thread
    scores.resize((size_t)n_head * kKeysPerRange);
    for (long r = r0; r < r1; r++) {
      const int j0 = (int)r * kKeysPerRange;
      attend_key_range(all + range_floats * r, scores.data(), q, k_cache, v_cache, j0, std::min(keys, j0 + kKeysPerRange), C, n_head, scale);
    }
  });
  merge_ranges(out, all, ranges, C, n_head);
}

// ---- Many queries: blocks of queries × one head -----------------------------------------------------------

// The per-thread buffers of one (head, query block) chunk.
struct QueryBlockScratch {
  std::vector<float> scores;     // (kQueryBlock, kKeyBlock): scores, then probabilities in place
  std::vector<float> acc;        // (kQueryBlock, hs_padded): Σ p v, unnormalised
  std::vector<float> max_score;  // (kQueryBlock)
  std::vector<float> total;      // (kQueryBlock)
  std::vector<float> keys_t;     // kKeyBlock / kTileCols panels of (hs, kTileCols): the key block transposed
  std::vector<float> values;     // hs_padded / kTileCols panels of (kKeyBlock, kTileCols)
  void size_for(int hs_padded, int hs) {
    scores.resize((size_t)kQueryBlock * kKeyBlock);
    acc.resize((size_t)kQueryBlock * hs_padded);
    max_score.resize(kQueryBlock);
    total.resize(kQueryBlock);
    keys_t.resize((size_t)hs * kKeyBlock);
    values.resize((size_t)kKeyBlock * hs_padded);
  }
};

// Folds one block of scores (rows × n keys starting at key kb0) into the running softmax of each query row:
// scores become probabilities e^(s·scale - new max) (0 past the row's visible keys), acc and total rescale.
void fold_scores(QueryBlockScratch& w, int rows, int n, int kb0, int pos, int t0, int max_ctx, int hs_padded, float scale) {
  for (int r = 0; r < rows; r++) {
    float* s = w.scores.data() + (size_t)r * kKeyBlock;
    const int visible = std::clamp(visible_keys(pos, t0 + r, max_ctx) - kb0, 0, n);
    float block_max = -INFINITY;
    for (int j = 0; j < visible; j++) block_max = fmaxf(block_max, s[j] * scale);
    const float new_max = fmaxf(w.max_score[r], block_max);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < visible; j++) {
      s[j] = exp_approx(s[j] * scale - new_max);
      sum += s[j];
    }
    for (int j = visible; j < kKeyBlock; j++) s[j] = 0.0f;
    if (new_max == w.max_score[r]) {
      w.total[r] += sum;
      continue;
    }
    const float rescale = w.max_score[r] == -INFINITY ? 0.0f : expf(w.max_score[r] - new_max);
    w.total[r] = w.total[r] * rescale + sum;
    w.max_score[r] = new_max;
    float* a = w.acc.data() + (size_t)r * hs_padded;
#pragma omp simd
    for (int d = 0; d < hs_padded; d++) a[d] *= rescale;
  }
}

// out rows [t0, t1), head h: queries from qkv (T, 3C) against cache rows [0, visible_keys(t1 - 1)).
void attend_query_block(float* out, const float* qkv, const float* k_cache, const float* v_cache, int pos, int t0, int t1,
                        int h, int C, int n_head, int max_ctx) {
  const int hs = C / n_head;
  const int hs_padded = (hs + kTileCols - 1) / kTileCols * kTileCols;
  const float scale = 1.0f / sqrtf((float)hs);
  const int rows = t1 - t0;
  static thread_local QueryBlockScratch w;
  w.size_for(hs_padded, hs);
  std::fill(w.max_score.begin(), w.max_score.end(), -INFINITY);
  std::fill(w.total.begin(), w.total.end(), 0.0f);
  std::fill(w.acc.begin(), w.acc.end(), 0.0f);
  const float* q = qkv + (size_t)t0 * 3 * C + h * hs;
  const int keys = visible_keys(pos, t1 - 1, max_ctx);
  for (int kb0 = 0; kb0 < keys; kb0 += kKeyBlock) {
    const int n = std::min(kKeyBlock, keys - kb0);
    // scores (rows, kKeyBlock) = q (rows, hs) @ K[kb0 : kb0 + n, head h]^T
    for (int p = 0; p * kTileCols < kKeyBlock; p++)
      pack_panel_transposed(w.keys_t.data() + (size_t)p * hs * kTileCols, k_cache + (size_t)(kb0 + p * kTileCols) * C + h * hs, C,
                            hs, std::clamp(n - p * kTileCols, 0, kTileCols));
    for (int r0 = 0; r0 < rows; r0 += kTileRows)
      for (int p = 0; p * kTileCols < kKeyBlock; p++)
        tile_multiply_rows(std::min(kTileRows, rows - r0), hs, q + (size_t)r0 * 3 * C, 3 * C, w.keys_t.data() + (size_t)p * hs * kTileCols,
                           w.scores.data() + (size_t)r0 * kKeyBlock + p * kTileCols, kKeyBlock, TileOut::kStore, nullptr);
    fold_scores(w, rows, n, kb0, pos, t0, max_ctx, hs_padded, scale);
    // acc (rows, hs) += p (rows, n) @ V[kb0 : kb0 + n, head h]
    for (int p = 0; p * kTileCols < hs_padded; p++)
      pack_panel(w.values.data() + (size_t)p * kKeyBlock * kTileCols, v_cache + (size_t)kb0 * C + h * hs + p * kTileCols, C, n,
                 std::min(kTileCols, hs - p * kTileCols));
    for (int r0 = 0; r0 < rows; r0 += kTileRows)
      for (int p = 0; p * kTileCols < hs_padded; p++)
        tile_multiply_rows(std::min(kTileRows, rows - r0), n, w.scores.data() + (size_t)r0 * kKeyBlock, kKeyBlock,
                           w.values.data() + (size_t)p * kKeyBlock * kTileCols, w.acc.data() + (size_t)r0 * hs_padded + p * kTileCols,
                           hs_padded, TileOut::kAdd, nullptr);
  }
  for (int r = 0; r < rows; r++) {
    float* y = out + (size_t)(t0 + r) * C + h * hs;
    const float* a = w.acc.data() + (size_t)r * hs_padded;
    const float inv = 1.0f / w.total[r];
#pragma omp simd
    for (int d = 0; d < hs; d++) y[d] = a[d] * inv;
  }
}

}  // namespace

// out: (T, C); query t (absolute position pos + t) attends to cache rows [0, pos + t]
extern "C" void op_attention(float* out, float*, const float* qkv, const float* k_cache, const float* v_cache,
                             const int* state, int T, int C, int n_head, int max_ctx) {
  OpTimer timer(OP_ATTENTION);
  const int pos = state[STATE_POS];
  if (T == 1) {
    attend_one_query(out, qkv, k_cache, v_cache, visible_keys(pos, 0, max_ctx), C, n_head);
    return;
  }
  // chunks in decreasing work: the last query block (most keys) first, so the tail is short
  const int blocks = (T + kQueryBlock - 1) / kQueryBlock;
  const long work = (long)C * ((long)T * pos + (long)T * T / 2);
  parallel_range((long)blocks * n_head, 1, work, [&](long c0, long c1) {
    for (long c = c0; c < c1; c++) {
      const int block = blocks - 1 - (int)(c / n_head), h = (int)(c % n_head);
      const int t0 = block * kQueryBlock;
      attend_query_block(out, qkv, k_cache, v_cache, pos, t0, std::min(T, t0 + kQueryBlock), h, C, n_head, max_ctx);
    }
  });
}
