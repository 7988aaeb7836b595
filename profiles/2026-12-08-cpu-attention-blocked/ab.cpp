// A/B of op_attention from two builds of the CPU library in one process: each round calls A then B (B then A on
// odd rounds) over LAYERS layers' caches (each its own mmap, huge-page advice unless SMALLPAGES=1), then a plain
// two-thread read of the same bytes, then one layer again (hot); prints the medians as GB/s (cold) and ns a key
// (hot), and the largest difference between A's and B's outputs.
// Build: g++ -O2 -mavx2 ab.cpp -o ab -ldl -lpthread
// Libraries: cuda/*.cpp compiled as the project does (-O3 -march=native -fopenmp-simd -fPIC -std=c++20), linked
// with -shared. Run: LAYERS=N [SMALLPAGES=1] ./ab A.so B.so n_head n_kv head_size keys threads rounds [batch]
#include <dlfcn.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <chrono>
#include <vector>
#include <algorithm>
#include <math.h>
#include <thread>
#include <immintrin.h>
typedef void (*AttnFn)(float*, float*, const float*, const void*, const void*, const int*, int, int, int, int, int, int, int);
typedef void (*ThreadsFn)(int);
struct Lib { AttnFn attn; ThreadsFn threads; };
static Lib open_lib(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
  return {(AttnFn)dlsym(h, "op_attention"), (ThreadsFn)dlsym(h, "cpu_set_threads")};
}
int main(int argc, char** argv) {
  // ab libA libB n_head n_kv hs keys threads rounds [B]
  Lib libs[2] = {open_lib(argv[1]), open_lib(argv[2])};
  int n_head = atoi(argv[3]), n_kv = atoi(argv[4]), hs = atoi(argv[5]), keys = atoi(argv[6]), threads = atoi(argv[7]), rounds = atoi(argv[8]);
  int B = argc > 9 ? atoi(argv[9]) : 1;
  for (auto& l : libs) l.threads(threads);
  int layers = getenv("LAYERS") ? atoi(getenv("LAYERS")) : 30, max_ctx = keys + 1, C = n_head * hs, kvC = n_kv * hs;
  size_t per = (size_t)B * max_ctx * kvC;
  std::vector<float*> K(layers), V(layers);
  for (int l = 0; l < layers; l++) {
    K[l] = (float*)mmap(nullptr, per * 4, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    V[l] = (float*)mmap(nullptr, per * 4, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (!getenv("SMALLPAGES")) { madvise(K[l], per * 4, MADV_HUGEPAGE); madvise(V[l], per * 4, MADV_HUGEPAGE); }
    for (size_t i = 0; i < per; i++) { K[l][i] = ((i * 7919) % 97) * 0.01f - 0.4f; V[l][i] = (i % 89) * 0.01f; }
  }
  std::vector<float> qkv((size_t)B * (C + 2 * kvC)), out((size_t)B * C), out2((size_t)B * C);
  for (size_t i = 0; i < qkv.size(); i++) qkv[i] = ((i * 31) % 17) * 0.05f - 0.4f;
  std::vector<int> state(4 * B, 0);
  for (int b = 0; b < B; b++) state[4 * b] = keys - 1;
  std::vector<double> t[2], hot[2], rd;
  size_t used = (size_t)B * max_ctx * kvC;
  auto plain = [&]() {
    float sums[2];
    auto reader = [&](int th) { __m256 acc[8]; for (auto& a : acc) a = _mm256_setzero_ps();
      for (int l = 0; l < layers; l++) for (float* buf : {K[l], V[l]}) { size_t lo = used / 2 * th, hi = th ? used : used / 2;
        for (size_t i = lo; i + 64 <= hi; i += 64) for (int j = 0; j < 8; j++) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(buf + i + 8 * j)); }
      float s = 0; for (auto& a : acc) { float f[8]; _mm256_storeu_ps(f, a); for (float x : f) s += x; } sums[th] = s; };
    auto a = std::chrono::steady_clock::now();
    std::thread t1(reader, 1); reader(0); t1.join();
    rd.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    if (sums[0] == 1234.5f) puts("");
  };
  for (int r = 0; r < rounds; r++)
    for (int w = 0; w < 2; w++) {
      int which = (r % 2) ? 1 - w : w;
      Lib& L = libs[which];
      for (int rep = 0; rep < 3; rep++) {
        auto a = std::chrono::steady_clock::now();
        for (int l = 0; l < layers; l++) L.attn(out.data(), nullptr, qkv.data(), K[l], V[l], state.data(), B, 1, C, n_head, n_kv, max_ctx, 0);
        t[which].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      }
      plain();
      auto a = std::chrono::steady_clock::now();
      for (int l = 0; l < layers; l++) L.attn(out.data(), nullptr, qkv.data(), K[0], V[0], state.data(), B, 1, C, n_head, n_kv, max_ctx, 0);
      hot[which].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
  libs[0].attn(out.data(), nullptr, qkv.data(), K[1], V[1], state.data(), B, 1, C, n_head, n_kv, max_ctx, 0);
  libs[1].attn(out2.data(), nullptr, qkv.data(), K[1], V[1], state.data(), B, 1, C, n_head, n_kv, max_ctx, 0);
  double maxd = 0, maxv = 0;
  for (size_t i = 0; i < out.size(); i++) { maxd = std::max(maxd, (double)fabsf(out[i] - out2[i])); maxv = std::max(maxv, (double)fabsf(out[i])); }
  double bytes = (double)layers * B * keys * kvC * 4 * 2;
  for (int w = 0; w < 2; w++) {
    std::sort(t[w].begin(), t[w].end()); std::sort(hot[w].begin(), hot[w].end());
    double m = t[w][t[w].size() / 2], h = hot[w][hot[w].size() / 2];
    printf("%s %d/%d hs%d keys %d B%d thr %d: cold %.1f GB/s (best %.1f)  hot %.1f ns/key/seq\n", w ? "B" : "A", n_head, n_kv, hs, keys, B, threads, bytes / m / 1e9, bytes / t[w][0] / 1e9, h / layers / keys / B * 1e9);
  }
  std::sort(rd.begin(), rd.end());
  printf("plain 2-thread read of the same bytes: %.1f GB/s (best %.1f)\n", bytes / rd[rd.size() / 2] / 1e9, bytes / rd[0] / 1e9);
  printf("max |A-B| %.3g of max %.3g\n", maxd, maxv);
}
