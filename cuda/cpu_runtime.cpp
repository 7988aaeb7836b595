// runtime.h on host memory, plus the CPU library's threads and per-op timers.
#include "cpu_runtime.h"
#include "runtime.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vector>

namespace {

enum CpuError { kOk = 0, kOutOfMemory = 2, kInvalidValue = 1 };

int g_last_error = kOk;
// be_alloc's live mappings and their lengths, for munmap. Reserved once, so that an allocation does not
// allocate bookkeeping on the heap: the process's resident memory then grows by exactly what is touched,
// which the KV-cache measurement (src/profile/study.ts) reads to the page.
struct Mapping {
  void* ptr;
  size_t bytes;
};
constexpr size_t kReservedMappings = 4096;
std::vector<Mapping> g_mapped;

constexpr int kProfCapacity = 1 << 20;
constexpr int kPeakSteps = 1 << 20;  // FMA steps per chain in cpu_measure_fp32_peak
bool g_prof_on = false;
std::vector<ProfRecord> g_prof;
int g_prof_dropped = 0;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int fail(int code) {
  g_last_error = code;
  return code;
}

uint64_t meminfo_kib(const char* key) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long value = 0;
  const size_t key_len = strlen(key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      sscanf(line + key_len + 1, "%llu", &value);
      break;
    }
  }
  fclose(f);
  return value;
}

}  // namespace

// A fused op's twin runs the unfused twins: only the outermost op of a call is timed.
thread_local int g_open_timers = 0;

OpTimer::OpTimer(OpCode op) : op_(op), start_ns_(g_prof_on && g_open_timers == 0 ? now_ns() : 0) { g_open_timers++; }

OpTimer::~OpTimer() {
  if (--g_open_timers > 0 || !g_prof_on) return;
  if ((int)g_prof.size() >= kProfCapacity) {
    g_prof_dropped++;
    return;
  }
  g_prof.push_back({op_, start_ns_, now_ns()});
}

extern "C" {

int be_init(int device) { return device == 0 ? kOk : fail(kInvalidValue); }

int be_last_error(void) {
  int e = g_last_error;
  g_last_error = kOk;
  return e;
}

const char* be_error_name(int code) {
  switch (code) {
    case kOk: return "cpuSuccess";
    case kInvalidValue: return "cpuErrorInvalidValue";
    case kOutOfMemory: return "cpuErrorMemoryAllocation";
    default: return "cpuErrorUnknown";
  }
}

const char* be_error_string(int code) {
  switch (code) {
    case kOk: return "no error";
    case kInvalidValue: return "invalid argument";
    case kOutOfMemory: return "out of host memory";
    default: return "unknown error";
  }
}

// Anonymous private pages: zero, as be_alloc promises (runtime.h), page-aligned (more than the 64 bytes the
// vector loads want), and committed by the kernel only on first touch, so a buffer a step writes in part
// (the KV cache, activations sized for n_positions rows) costs resident memory only where written.
void* be_alloc(size_t bytes) {
  if (bytes == 0) {
    fail(kInvalidValue);
    return nullptr;
  }
  void* ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) {
    fail(kOutOfMemory);
    return nullptr;
  }
  if (g_mapped.capacity() == 0) g_mapped.reserve(kReservedMappings);
  g_mapped.push_back({ptr, bytes});
  return ptr;
}

int be_free(void* ptr) {
  if (!ptr) return kOk;
  for (Mapping& m : g_mapped) {
    if (m.ptr != ptr) continue;
    munmap(m.ptr, m.bytes);
    m = g_mapped.back();
    g_mapped.pop_back();
    return kOk;
  }
  return fail(kInvalidValue);
}

// Bytes of be_alloc's mappings that are resident (mincore, page by page): what the library's buffers hold
// in memory, exact to the page and blind to the rest of the process (the JS heap grows and shrinks on its
// own threads) and to other processes.
uint64_t cpu_resident_bytes(void) {
  static std::vector<unsigned char> in_core;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t resident_pages = 0;
  for (const Mapping& m : g_mapped) {
    const size_t pages = (m.bytes + page - 1) / page;
    if (in_core.size() < pages) in_core.resize(pages);
    if (mincore(m.ptr, m.bytes, in_core.data()) != 0) continue;
    for (size_t i = 0; i < pages; i++) resident_pages += in_core[i] & 1;
  }
  return resident_pages * page;
}

int be_upload(void* dst, const void* host_src, size_t bytes) {
  memcpy(dst, host_src, bytes);
  return kOk;
}

int be_download(void* host_dst, const void* src, size_t bytes) {
  memcpy(host_dst, src, bytes);
  return kOk;
}

int be_copy(void* dst, const void* src, size_t bytes) {
  memmove(dst, src, bytes);
  return kOk;
}

int be_fill_u32(void* dst, uint32_t value, size_t count) {
  uint32_t* words = static_cast<uint32_t*>(dst);
  for (size_t i = 0; i < count; i++) words[i] = value;
  return kOk;
}

int be_synchronize(void) { return be_last_error(); }

// free = the kernel's MemAvailable, total = MemTotal (bytes).
int be_mem_info(uint64_t* out) {
  out[0] = meminfo_kib("MemAvailable") * 1024;
  out[1] = meminfo_kib("MemTotal") * 1024;
  return kOk;
}

int64_t cpu_now_ns(void) { return now_ns(); }

int cpu_threads(void) { return omp_get_max_threads(); }

void cpu_set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

void prof_enable(int on) {
  g_prof_on = on != 0;
  if (g_prof_on && g_prof.capacity() == 0) g_prof.reserve(kProfCapacity);
}

void prof_reset(void) {
  g_prof.clear();
  g_prof_dropped = 0;
}

int prof_count(void) { return (int)g_prof.size(); }

int prof_dropped(void) { return g_prof_dropped; }

int prof_read(int64_t* out, int max) {
  const int n = (int)g_prof.size() < max ? (int)g_prof.size() : max;
  for (int i = 0; i < n; i++) {
    out[3 * i] = g_prof[i].op;
    out[3 * i + 1] = g_prof[i].start_ns;
    out[3 * i + 2] = g_prof[i].end_ns;
  }
  return n;
}

// Read bandwidth: every thread sums its share of a buffer of `bytes`, best of `iters` passes (bytes/s).
double cpu_measure_read_bandwidth(uint64_t bytes, int iters) {
  const size_t n = bytes / sizeof(float);
  float* data = static_cast<float*>(be_alloc(n * sizeof(float)));
  if (!data) return 0.0;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) data[i] = (float)(i & 1023);
  double best_s = 1e30;
  volatile float sink = 0.0f;
  for (int it = 0; it < iters; it++) {
    const int64_t t0 = now_ns();
    float total = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; i++) total += data[i];
    const double s = (now_ns() - t0) * 1e-9;
    sink = sink + total;
    if (s < best_s) best_s = s;
  }
  be_free(data);
  return (double)(n * sizeof(float)) / best_s;
}

// fp32 arithmetic peak: independent FMA chains per thread, kept in vector registers (FLOP/s).
double cpu_measure_fp32_peak(int iters) {
  constexpr int kChains = 64;  // enough independent accumulators to cover FMA latency on 2 ports
  double best_s = 1e30;
  volatile float sink = 0.0f;
  const int threads = omp_get_max_threads();
  for (int it = 0; it < iters; it++) {
    const int64_t t0 = now_ns();
    float result = 0.0f;
#pragma omp parallel reduction(+ : result)
    {
      float acc[kChains];
      for (int k = 0; k < kChains; k++) acc[k] = 1.0f + k * 1e-3f;
      const float a = 0.999999f, b = 1e-7f;
      for (int step = 0; step < kPeakSteps; step++)
#pragma omp simd
        for (int k = 0; k < kChains; k++) acc[k] = acc[k] * a + b;
      for (int k = 0; k < kChains; k++) result += acc[k];
    }
    const double s = (now_ns() - t0) * 1e-9;
    sink = sink + result;
    if (s < best_s) best_s = s;
  }
  return 2.0 * kChains * (double)kPeakSteps * threads / best_s;
}

}  // extern "C"
