// The CPU decode matvec's weight layouts on GPT-2-large's fp32 shapes (36 copies of each layer matrix, 3.1 GB),
// each timed between two passes of the read probe (1 GiB, past the last-level cache), over many rounds, the
// variants' order rotated each round. Printed: each variant's GB/s ÷ the mean of its two probe passes, the
// median over all rounds and over the rounds whose probes both read > 65 GB/s (the host's fast state: this VM's
// DRAM bandwidth swings between ~45 and ~85 GB/s within minutes, and a layout's loss shows only when it is fast).
//   bands (C,OC):   the few-rows op_linear before 2026-12-06 (copied below verbatim): 8 input rows side by side
//                   per pass, 4–16 bands of rows into partials summed in band order
//   op_linear (OC,C): the library's op_linear now, on an out-major matrix: one contiguous dot product per output
//   bandsN (C,OC):  plain N-rows-per-pass bands (16 bands), no prefetch
//   colsN (C,OC):   N-vector column panels walking all C rows, accumulators in registers (pfK: prefetch K rows on)
// Build and run from the repository root, after `bun src/cli/build.ts cpu`:
//   g++ -O3 -march=native -std=c++20 -Icuda -Ibuild/include -o /tmp/layouts PATH/layouts.cpp -Lbuild -lgpt2_cpu
//     -Wl,-rpath,$PWD/build && /tmp/layouts 100   (one line; the argument is the rounds)
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "cpu_math.h"
#include "cpu_runtime.h"
extern "C" {
int cpu_read_prepare(void* data, unsigned long bytes);
double cpu_read_pass(const void* data, unsigned long bytes);
void op_linear(float* out, float*, const float* inp, const void* weight, const float* bias, int rows, int C, int OC,
               int wdtype);
}

namespace before {  // cuda/linear.cpp's few-rows path at 60bb815, fp32 and T = 1 as the step runs it
constexpr int kRowsPerPass = 8;            // weight rows folded into a partial per pass (few-rows path)
constexpr size_t kShortRowBytes = 2048;    // weight rows up to this long are prefetched a pass ahead (few-rows path)
constexpr long kPartialFloats = 1L << 16;  // one row's partials across the bands (256 KB) stay in L2
constexpr int kMaxBands = 16;              // ~0.5 MB of fp32 weights per band for GPT-2 small's matvecs
constexpr int kMinBands = 4;               // enough to share between threads when OC is large
int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }
template <typename V> inline V fold8(const float* x, const V (&w)[kRowsPerPass]) {
  return (x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3]) +
         (x[4] * w[4] + x[5] * w[5] + x[6] * w[6] + x[7] * w[7]);
}

// partial: (T, OC) = inp[:, c0:c1] @ weight[c0:c1, :]
// Eight weight rows per pass: each vector of them is loaded and widened once, then folded into every row's
// partial (one load and one store of the partial per eight FMAs). A pass reads its eight rows side by side;
// where they are short (bf16 and f16 rows of 768 columns: 1.5 KB, several to a 4 KB page) the hardware
// prefetcher falls behind, so the next pass's rows are prefetched as this one reads (measured: the 768-column
// bf16 matvecs 15–23% faster, the longer rows of fp32 or wider matrices slower with it, so they go without).
template <typename S>
void accumulate_band(float* partial, const float* inp, const S* weight, int T, int C, int OC, int c0, int c1) {
  memset(partial, 0, sizeof(float) * (size_t)T * OC);
  const int vector_cols = OC - OC % kVecFloats;
  const bool prefetch = OC * sizeof(S) <= kShortRowBytes;
  constexpr int kPassBytesPerVector = kRowsPerPass * kVecFloats * (int)sizeof(S);  // of a pass, per column vector
  int c = c0;
  for (; c + kRowsPerPass <= c1; c += kRowsPerPass) {
    const S* w = weight + (size_t)c * OC;
    const char* next_pass = reinterpret_cast<const char*>(w + (size_t)kRowsPerPass * OC);
    for (int o = 0; o < vector_cols; o += kVecFloats) {
      if (prefetch)
#pragma GCC unroll 8
        for (int b = 0; b < kPassBytesPerVector; b += 64)
          __builtin_prefetch(next_pass + (size_t)o * kRowsPerPass * sizeof(S) + b);
      vecf wv[kRowsPerPass];
#pragma GCC unroll 8
      for (int k = 0; k < kRowsPerPass; k++) wv[k] = load_widened(w + (size_t)k * OC + o);
      for (int t = 0; t < T; t++) {
        const float* x = inp + (size_t)t * C + c;
        float* p = partial + (size_t)t * OC + o;
        store_vec(p, load_vec(p) + fold8(x, wv));
      }
    }
    for (int o = vector_cols; o < OC; o++) {
      float wv[kRowsPerPass];
      for (int k = 0; k < kRowsPerPass; k++) wv[k] = widen(w[(size_t)k * OC + o]);
      for (int t = 0; t < T; t++) partial[(size_t)t * OC + o] += fold8(inp + (size_t)t * C + c, wv);
    }
  }
  for (; c < c1; c++) {
    const S* w_row = weight + (size_t)c * OC;
    for (int t = 0; t < T; t++) {
      const float x = inp[(size_t)t * C + c];
      float* p = partial + (size_t)t * OC;
      int o = 0;
      for (; o < vector_cols; o += kVecFloats) store_vec(p + o, load_vec(p + o) + splat(x) * load_widened(w_row + o));
      for (; o < OC; o++) p[o] += x * widen(w_row[o]);
    }
  }
}

// Bands: as many as one row's partials budget allows (kMinBands..kMaxBands), one for a small matrix; each a
// whole number of passes of kRowsPerPass rows. Not T: a row is summed the same way in any batch.
int band_rows(int C, int OC) {
  int bands = 1;
  if ((long)C * OC >= kParallelMinWork) bands = (int)std::clamp(kPartialFloats / OC, (long)kMinBands, (long)kMaxBands);
  return ceil_div(ceil_div(C, bands), kRowsPerPass) * kRowsPerPass;
}

template <typename S>
void linear_few_rows(float* out, const float* inp, const S* weight, const float* bias, int T, int C, int OC) {
  const int rows = band_rows(C, OC);
  const int bands = ceil_div(C, rows);
  const size_t partial_floats = (size_t)T * OC;
  static thread_local std::vector<float> partials;  // (bands, T, OC), reused across calls
  partials.resize(partial_floats * bands);
  float* all = partials.data();
  parallel_chunks(bands, [&](int band) {
    accumulate_band(all + partial_floats * band, inp, weight, T, C, OC, band * rows, std::min(C, (band + 1) * rows));
  });
  for (int t = 0; t < T; t++) {
    float* y = out + (size_t)t * OC;
    memcpy(y, bias, sizeof(float) * OC);
    for (int band = 0; band < bands; band++) {
      const float* p = all + partial_floats * band + (size_t)t * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++) y[o] += p[o];
    }
  }
}

}  // namespace before

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static float* alloc(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  float* f = (float*)p;
  for (size_t i = 0; i < bytes / 4; i++) f[i] = (float)(i % 17) * 1e-3f;
  return f;
}

// N rows per pass, `bands` bands of rows into partials, (C, OC) layout
template <int N>
void bands(float* out, const float* x, const float* w, int C, int OC, int band_count) {
  static std::vector<float> partials;
  partials.resize((size_t)band_count * OC);
  const int rows = (C + band_count - 1) / band_count;
  parallel_chunks(band_count, [&](int b) {
    float* partial = partials.data() + (size_t)b * OC;
    memset(partial, 0, sizeof(float) * OC);
    for (int c = b * rows; c < std::min(C, (b + 1) * rows); c += N) {
      const float* wr = w + (size_t)c * OC;
      for (int o = 0; o < OC; o += kVecFloats) {
        vecf acc = load_vec(partial + o);
#pragma GCC unroll 8
        for (int k = 0; k < N; k++) acc += x[c + k] * load_vec(wr + (size_t)k * OC + o);
        store_vec(partial + o, acc);
      }
    }
  });
  for (int o = 0; o < OC; o++) {
    float s = 0;
    for (int b = 0; b < band_count; b++) s += partials[(size_t)b * OC + o];
    out[o] = s;
  }
}

// column panels of NV vectors: each chunk walks all C rows of its columns, prefetching PF rows ahead (0: none)
template <int NV, int PF>
void column_panels(float* out, const float* x, const float* w, int C, int OC) {
  constexpr int W = NV * kVecFloats;
  parallel_chunks(OC / W, [&](int p) {
    vecf acc[NV] = {};
    const float* col = w + (size_t)p * W;
    for (int c = 0; c < C; c++) {
      const float* r = col + (size_t)c * OC;
      if (PF)
#pragma GCC unroll 16
        for (int b = 0; b < W * 4; b += 64) __builtin_prefetch((const char*)(r + (size_t)PF * OC) + b);
#pragma GCC unroll 16
      for (int k = 0; k < NV; k++) acc[k] += x[c] * load_vec(r + k * kVecFloats);
    }
    for (int k = 0; k < NV; k++) store_vec(out + (size_t)p * W + k * kVecFloats, acc[k]);
  });
}

struct Shape {
  const char* name;
  int C, OC, copies;
};

int main(int argc, char** argv) {
  cpu_set_threads(2);
  const std::vector<Shape> shapes = {
      {"qkv", 1280, 3840, 36}, {"o", 1280, 1280, 36}, {"fc", 1280, 5120, 36}, {"proj", 5120, 1280, 36}};
  const unsigned long probe_bytes = 1ul << 30;
  float* probe = alloc(probe_bytes);
  cpu_read_prepare(probe, probe_bytes);
  std::vector<float> x(8192, 0.01f), out(1 << 17), bias(16384, 0.f);
  std::vector<float*> mats;
  size_t total = 0;
  for (const Shape& s : shapes) {
    mats.push_back(alloc((size_t)s.C * s.OC * 4 * s.copies));
    total += (size_t)s.C * s.OC * 4 * s.copies;
  }
  const char* names[] = {"bands (C,OC), before", "op_linear (OC,C), now", "bands4 (C,OC)", "bands8 (C,OC)",
                         "cols16 (C,OC)",        "cols16pf8 (C,OC)",      "cols8pf16 (C,OC)"};
  const int variants = 7;
  const auto run = [&](int v, const Shape& s, const float* w) {
    switch (v) {
      case 0: {
        static std::vector<float> partials;
        const int rows = before::band_rows(s.C, s.OC), count = before::ceil_div(s.C, rows);
        partials.resize((size_t)count * s.OC);
        parallel_chunks(count, [&](int b) {
          before::accumulate_band(partials.data() + (size_t)b * s.OC, x.data(), w, 1, s.C, s.OC, b * rows,
                                  std::min(s.C, (b + 1) * rows));
        });
        for (int o = 0; o < s.OC; o++) {
          float y = bias[o];
          for (int b = 0; b < count; b++) y += partials[(size_t)b * s.OC + o];
          out[o] = y;
        }
        return;
      }
      case 1: return op_linear(out.data(), nullptr, x.data(), w, bias.data(), 1, s.C, s.OC, 0);
      case 2: return bands<4>(out.data(), x.data(), w, s.C, s.OC, 16);
      case 3: return bands<8>(out.data(), x.data(), w, s.C, s.OC, 16);
      case 4: return column_panels<16, 0>(out.data(), x.data(), w, s.C, s.OC);
      case 5: return column_panels<16, 8>(out.data(), x.data(), w, s.C, s.OC);
      case 6: return column_panels<8, 16>(out.data(), x.data(), w, s.C, s.OC);
    }
  };
  std::vector<std::vector<double>> ratio(variants), fast(variants);
  const int rounds = argc > 1 ? atoi(argv[1]) : 20;
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < variants; i++) {
      const int v = (i + round) % variants;
      double t0 = now();
      cpu_read_pass(probe, probe_bytes);
      const double before_gbs = probe_bytes / (now() - t0) / 1e9;
      const double t = now();
      for (size_t m = 0; m < shapes.size(); m++)
        for (int c = 0; c < shapes[m].copies; c++)
          run(v, shapes[m], mats[m] + (size_t)c * shapes[m].C * shapes[m].OC);
      const double gbs = total / (now() - t) / 1e9;
      t0 = now();
      cpu_read_pass(probe, probe_bytes);
      const double after_gbs = probe_bytes / (now() - t0) / 1e9;
      ratio[v].push_back(gbs / ((before_gbs + after_gbs) / 2));
      if (before_gbs > 65 && after_gbs > 65) fast[v].push_back(gbs / ((before_gbs + after_gbs) / 2));
    }
  }
  const auto median = [](std::vector<double> a) {
    if (a.empty()) return 0.0;
    std::sort(a.begin(), a.end());
    return a[a.size() / 2];
  };
  printf("GB/s ÷ the probe's, median over %d rounds | over the rounds whose probes read > 65 GB/s\n", rounds);
  for (int v = 0; v < variants; v++)
    printf("%-24s %.3f (n=%zu) | %.3f (n=%zu)\n", names[v], median(ratio[v]), ratio[v].size(), median(fast[v]),
           fast[v].size());
}
