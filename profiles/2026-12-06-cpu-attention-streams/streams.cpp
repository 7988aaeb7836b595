// Why the CPU decode attention's time is its bytes' time plus its compute's: synthetic streams over 768-byte rows
// (SmolLM2-135M's K/V rows: 3 K/V heads of 64 floats) with the attention's kinds of per-row work, and op_attention
// itself over cold caches, over caches in the last-level cache, and at 1,000 and 8,191 keys.
//
//   g++ -O3 -march=native -std=c++20 -Ibuild/include -Icuda profiles/2026-12-06-cpu-attention-streams/streams.cpp
//     -Lbuild -lgpt2_cpu -Wl,-rpath,$PWD/build -o /tmp/streams && /tmp/streams
//
// Single thread unless said. Each figure is GB/s of the rows read (best of 3 passes); "DRAM" passes read 2 × 256 MB
// of rows once, "L2" passes read 2 × 512 KB 400 times (the same work with the rows in the core's L2).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops.h"
extern "C" void cpu_set_threads(int);

namespace {
constexpr int kRowFloats = 192, kHeadFloats = 64, kKvHeads = 3, kGroup = 3, kRange = 256;
float *K, *V;
size_t rows;
alignas(64) float queries[kKvHeads * kGroup * kHeadFloats];  // 9 heads' queries
alignas(64) float sums[kKvHeads * kGroup * kHeadFloats];     // 9 heads' weighted sums
alignas(64) float leaves[kKvHeads * kGroup * 16 * 16];       // (head, key of 16): a dot product's 16 partials

enum Work {
  kRead,             // each row's 12 vectors loaded and added: the read rate
  kScoreQInRegs,     // per K/V head: its 4 vectors loaded once, 3 heads' dot products with queries held in registers
  kScoreQFromL1,     // the same, the queries loaded from L1 into each multiply (the library's row-order scores)
  kScoreFolded,      // the same, the row's vector loaded again into each head's multiply (GCC's choice unless told)
  kWeighSumsInL1,    // per K/V head: its 4 vectors loaded once; 3 heads' sums (in L1) loaded, advanced, stored
  kColumnsQInRegs,   // kScoreQInRegs, but a 16-row tile a K/V head's columns at a time (the column-order passes)
  kColumnsPrefetch,  // kColumnsQInRegs with every line of the tile 16 rows on prefetched (prefetcht0)
};

inline void keep(__m512& v) { asm("" : "+v"(v)); }

// one K/V head's 4 vectors of `row` against its 3 query heads (first head `h0`), by `work`
template <Work work> inline void kv_head(const float* row, int h0, int key, __m512 (&q)[kGroup][4], __m512& acc) {
  __m512 x[4];
  for (int d = 0; d < 4; d++) {
    x[d] = _mm512_loadu_ps(row + d * 16);
    if (work != kScoreFolded) keep(x[d]);
  }
  for (int g = 0; g < kGroup; g++) {
    const float* query = queries + (h0 + g) * kHeadFloats;
    if (work == kWeighSumsInL1) {
      const __m512 w = _mm512_set1_ps(query[key & 63]);
      for (int d = 0; d < 4; d++) {
        float* at = sums + (h0 + g) * kHeadFloats + d * 16;
        _mm512_store_ps(at, _mm512_fmadd_ps(w, x[d], _mm512_load_ps(at)));
      }
      continue;
    }
    __m512 dot = _mm512_setzero_ps();
    for (int d = 0; d < 4; d++) {
      const __m512 qd = work == kScoreQInRegs || work >= kColumnsQInRegs ? q[g][d] : _mm512_load_ps(query + d * 16);
      dot = _mm512_fmadd_ps(qd, work == kScoreFolded ? _mm512_loadu_ps(row + d * 16) : x[d], dot);
    }
    _mm512_store_ps(leaves + ((h0 + g) * 16 + (key & 15)) * 16, dot);
  }
  acc = _mm512_add_ps(acc, x[0]);
}

template <Work work> double pass(size_t first, size_t count) {
  __m512 q[kGroup][4], acc = _mm512_setzero_ps();
  for (int g = 0; g < kGroup; g++)
    for (int d = 0; d < 4; d++) q[g][d] = _mm512_load_ps(queries + g * kHeadFloats + d * 16);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t r0 = first; r0 < first + count; r0 += kRange)
    for (const float* base : {K, V}) {  // a range's K rows, then its V rows, as the library reads them
      if (work >= kColumnsQInRegs) {
        for (size_t tile = r0; tile < r0 + kRange; tile += 16) {
          if (work == kColumnsPrefetch)
            for (int b = 0; b < 16 * kRowFloats * 4; b += 64)
              _mm_prefetch((const char*)(base + (tile + 16) * kRowFloats) + b, _MM_HINT_T0);
          for (int kv = 0; kv < kKvHeads; kv++)
            for (size_t i = tile; i < tile + 16; i++)
              kv_head<work>(base + i * kRowFloats + kv * kHeadFloats, kv * kGroup, (int)i, q, acc);
        }
        continue;
      }
      for (size_t i = r0; i < r0 + kRange; i++) {
        const float* row = base + i * kRowFloats;
        if (work == kRead) {
          for (int l = 0; l < 12; l++) acc = _mm512_add_ps(acc, _mm512_loadu_ps(row + l * 16));
          continue;
        }
        for (int kv = 0; kv < kKvHeads; kv++) kv_head<work>(row + kv * kHeadFloats, kv * kGroup, (int)i, q, acc);
      }
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = _mm512_reduce_add_ps(acc);
  (void)sink;
  return 2.0 * count * kRowFloats * 4 / s / 1e9;
}

double read_rate = 0;  // the read's DRAM rate, measured first

template <Work work> void report(const char* name) {
  double dram = 0, l2 = 0;
  for (int i = 0; i < 3; i++) dram = std::max(dram, pass<work>(0, rows));
  const size_t small = 512 * 1024 / (kRowFloats * 4) / kRange * kRange;  // 512 KB of K and of V
  for (int i = 0; i < 3; i++) {
    double seconds = 0;
    for (int r = 0; r < 400; r++) seconds += 2.0 * small * kRowFloats * 4 / 1e9 / pass<work>(0, small);
    l2 = std::max(l2, 400 * 2.0 * small * kRowFloats * 4 / 1e9 / seconds);
  }
  std::printf("  %-62s %6.1f GB/s  %6.1f GB/s  %4.2f\n", name, dram, l2, dram / std::min(l2, read_rate));
}
// op_attention on SmolLM2-135M's heads (9 / 3 of 64), fp32, one sequence, `keys` keys: the median of `rounds` calls
// over `layers` caches in turn (cold when they are larger than the last-level cache together), µs
double attention_us(int keys, int layers, int rounds, int threads) {
  cpu_set_threads(threads);
  const int C = 9 * kHeadFloats, kv_C = kKvHeads * kHeadFloats, max_ctx = keys + 16;
  std::vector<float> qkv(C + 2 * kv_C, 0.01f), out(C);
  std::vector<std::vector<float>> k(layers), v(layers);
  for (int l = 0; l < layers; l++) {
    k[l].resize((size_t)max_ctx * kv_C);
    v[l].resize((size_t)max_ctx * kv_C);
    for (size_t i = 0; i < k[l].size(); i++) k[l][i] = v[l][i] = (float)(i * 2654435761u % 1000) / 1000.0f - 0.5f;
  }
  const int state[4] = {keys - 1, 0, 0, 0};
  std::vector<double> us;
  for (int r = 0; r < rounds; r++)
    for (int l = 0; l < layers; l++) {
      const auto t0 = std::chrono::steady_clock::now();
      op_attention(out.data(), nullptr, qkv.data(), k[l].data(), v[l].data(), state, 1, 1, C, 9, kKvHeads, max_ctx,
                   DTYPE_F32);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}
}  // namespace

int main() {
  const size_t bytes = 256u << 20;
  rows = bytes / (kRowFloats * 4) / kRange * kRange;
  K = static_cast<float*>(std::aligned_alloc(64, bytes + (64u << 10)));
  V = static_cast<float*>(std::aligned_alloc(64, bytes + (64u << 10)));
  for (size_t i = 0; i < (bytes + (64u << 10)) / 4; i++) K[i] = V[i] = 1.0f / (1 + i % 7);
  for (float& q : queries) q = 0.01f;
  std::printf(
      "synthetic streams, single thread: work per row                 from DRAM    from L2   DRAM ÷ min(L2, read)\n");
  for (int i = 0; i < 3; i++) read_rate = std::max(read_rate, pass<kRead>(0, rows));
  report<kRead>("read: the 12 vectors added");
  report<kScoreQInRegs>("scores, row order, queries in registers");
  report<kScoreQFromL1>("scores, row order, queries loaded from L1");
  report<kScoreFolded>("scores, row order, the row's vector reloaded per head");
  report<kWeighSumsInL1>("weighing, row order, the sums in L1");
  report<kColumnsQInRegs>("scores, a K/V head's columns at a time (16-row tiles)");
  report<kColumnsPrefetch>("the same, the next tile prefetched");
  std::printf("\nop_attention, 9/3 heads of 64, fp32 (the library's build): median µs (GB/s)\n");
  for (int threads : {1, 2})
    for (int keys : {1000, 8191}) {
      const double bytes_read = 2.0 * keys * kKvHeads * kHeadFloats * 4;
      const double cold = attention_us(keys, keys > 2000 ? 24 : 200, keys > 2000 ? 4 : 3, threads);
      const double warm = attention_us(keys, 1, keys > 2000 ? 100 : 1000, threads);
      std::printf("  %d thread(s), %5d keys: cold caches %7.1f (%5.1f)   one cache, in the LLC %7.1f (%5.1f)\n",
                  threads, keys, cold, bytes_read / cold / 1e3, warm, bytes_read / warm / 1e3);
    }
}
