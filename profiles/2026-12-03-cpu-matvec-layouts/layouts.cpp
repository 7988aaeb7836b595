// The CPU decode matvec in two weight layouts on Llama-3.2-1B's fp32 shapes, against the read probe, interleaved.
//   bands (C, OC):   op_linear, the project's decode path (cuda/linear.cpp: bands of 8 input rows side by side)
//   row-dot (OC, C): op_lm_head on the transposed matrix (cuda/lm_head.cpp: one contiguous dot product per output)
// 16 copies of each layer matrix (a step's 16 layers), the LM head once; weights on madvise(MADV_HUGEPAGE) pages.
// Rounds alternate which layout goes first (on this VM the set read second in a round read slower in one test).
// Build and run from the repository root, after `bun src/cli/build.ts`:
//   g++ -O2 -o /tmp/layouts profiles/2026-12-03-cpu-matvec-layouts/layouts.cpp -Lbuild -lgpt2_cpu
//     -Wl,-rpath,$PWD/build && /tmp/layouts   (one line)
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#include <vector>
extern "C" {
void cpu_set_threads(int n);
int cpu_read_prepare(void* data, unsigned long bytes);
double cpu_read_pass(const void* data, unsigned long bytes);
void op_linear(float* out, float*, const float* inp, const void* weight, const float* bias, int rows, int C, int OC,
               int wdtype);
void op_lm_head(float* logits, const float* inp, const void* wte, int B, int T, int C, int V, int wdtype);
}
static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static float* alloc(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, bytes, MADV_HUGEPAGE);
  float* f = (float*)p;
  for (size_t i = 0; i < bytes / 4; i++) f[i] = (float)(i % 17) * 1e-3f;
  return f;
}
int main() {
  cpu_set_threads(2);
  struct Shape {
    const char* name;
    int C, OC, copies;
  };
  const std::vector<Shape> shapes = {{"qkv", 2048, 3072, 16},
                                     {"o", 2048, 2048, 16},
                                     {"gate_up", 2048, 16384, 16},
                                     {"down", 8192, 2048, 16},
                                     {"lm_head", 2048, 128256, 1}};
  const unsigned long probe_bytes = 2ul << 30;
  float* probe = alloc(probe_bytes);
  cpu_read_prepare(probe, probe_bytes);
  std::vector<float> x(8192, 0.01f), out(128256), bias(16384, 0.f);
  std::vector<float*> bands, rows;
  for (const Shape& s : shapes) {
    bands.push_back(alloc((size_t)s.C * s.OC * 4 * s.copies));
    rows.push_back(alloc((size_t)s.C * s.OC * 4 * s.copies));
  }
  printf("GB/s per matrix set; [all]: the step's bytes over its time (the LM head runs row-dot in both)\n");
  for (int round = 0; round < 8; round++) {
    const double t0 = now();
    cpu_read_pass(probe, probe_bytes);
    printf("round %d probe %.1f |", round, probe_bytes / (now() - t0) / 1e9);
    for (int k = 0; k < 2; k++) {
      const bool dot = (round % 2) ? k == 0 : k == 1;
      printf(" %s:", dot ? "row-dot (OC,C)" : "bands (C,OC)");
      double total_s = 0, total_b = 0;
      for (size_t i = 0; i < shapes.size(); i++) {
        const Shape& s = shapes[i];
        const size_t bytes = (size_t)s.C * s.OC * 4 * s.copies;
        const double t = now();
        for (int c = 0; c < s.copies; c++) {
          const float* w = (dot ? rows[i] : bands[i]) + (size_t)c * s.C * s.OC;
          if (dot || s.OC == 128256)
            op_lm_head(out.data(), x.data(), w, 1, 1, s.C, s.OC, 0);
          else
            op_linear(out.data(), nullptr, x.data(), w, bias.data(), 1, s.C, s.OC, 0);
        }
        const double dt = now() - t;
        total_s += dt;
        total_b += bytes;
        printf(" %s %.1f", s.name, bytes / dt / 1e9);
      }
      printf(" [all %.1f] |", total_b / total_s / 1e9);
    }
    printf("\n");
  }
}
