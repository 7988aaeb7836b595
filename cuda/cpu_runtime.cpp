// runtime.h on host memory, plus the CPU library's threads, per-op timers and peak probes.
#include "cpu_runtime.h"
#include "runtime.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "cpu_math.h"

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
constexpr int kPeakSteps = 1 << 18;  // FMA steps per chain and chunk in cpu_measure_fp32_peak: ~0.5 ms
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

// ---- The thread pool behind run_chunks ------------------------------------------------------------------

constexpr int64_t kSpinNs = 20000;  // how long a waiting thread polls before it sleeps: a few chunks' time

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Polls `done()` for kSpinNs, then sleeps on `word` (announced through `sleepers`) until done() holds.
// The waker changes `word` before it reads `sleepers` (both sequentially consistent), so no wake-up is lost.
template <typename Done>
void spin_then_sleep(std::atomic<uint32_t>& word, std::atomic<int>& sleepers, const Done& done) {
  const int64_t give_up = now_ns() + kSpinNs;
  for (int i = 0; !done(); i++) {
    cpu_relax();
    if ((i & 63) == 63 && now_ns() > give_up) {
      sleepers.fetch_add(1);
      for (uint32_t seen = word.load(); !done(); seen = word.load()) futex_wait(word, seen);
      sleepers.fetch_sub(1);
      return;
    }
  }
}

// data[begin:end] = a pattern the compiler cannot fold away
void fill_pattern(float* data, size_t begin, size_t end) {
  for (size_t i = begin; i < end; i++) data[i] = (float)(i & 1023);
}

constexpr size_t kReadChunkFloats = 1 << 18;  // 1 MB chunks: the pool shares a pass out in these
int read_chunks(size_t n) { return (int)((n + kReadChunkFloats - 1) / kReadChunkFloats); }
size_t read_chunk_end(int c, size_t n) { return (c + 1) * kReadChunkFloats < n ? (c + 1) * kReadChunkFloats : n; }

// data[begin:end] summed in kReadAccumulators independent vectors, so that several cache lines are in flight and
// no add waits for the one before it.
constexpr int kReadAccumulators = 4;
float sum_floats(const float* data, size_t begin, size_t end) {
  vecf acc[kReadAccumulators] = {};
  size_t i = begin;
  for (; i + kReadAccumulators * kVecFloats <= end; i += kReadAccumulators * kVecFloats)
#pragma GCC unroll 4
    for (int k = 0; k < kReadAccumulators; k++) acc[k] += load_vec(data + i + k * kVecFloats);
  float total = 0.0f;
  for (; i < end; i++) total += data[i];
  for (int k = 0; k < kReadAccumulators; k++) total += sum_lanes(acc[k]);
  return total;
}

constexpr int kFmaChains = 12;  // independent vector accumulators: FMA latency (4 cycles) × 2 ports, and room

// `steps` rounds of kFmaChains independent vector FMAs (2 · kFmaChains · kVecFloats FLOPs each); returns their sum.
float fma_chains(int steps) {
  vecf acc[kFmaChains];
  for (int k = 0; k < kFmaChains; k++) acc[k] = splat(1.0f + k * 1e-3f);
  const vecf a = splat(0.999999f), b = splat(1e-7f);
  for (int step = 0; step < steps; step++)
#pragma GCC unroll 16
    for (int k = 0; k < kFmaChains; k++) acc[k] = acc[k] * a + b;
  float result = 0.0f;
  for (int k = 0; k < kFmaChains; k++)
    for (int lane = 0; lane < kVecFloats; lane++) result += acc[k][lane];
  return result;
}

int cpus_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

// A job is published as a generation number; its chunks are claimed through `ticket_` = (generation << 32)
// | next chunk, so a worker that wakes late can never claim a chunk of a newer job with an older job's
// function. The job's fields change like a seqlock's data: the caller first closes the ticket (a chunk
// index past any job's end), then writes the fields, then opens the new ticket; a claimer reads the fields
// between loading the ticket and its compare-and-swap, so it either saw the fields its ticket goes with or
// its swap fails.
class Pool {
  static constexpr uint32_t kClosed = 0xffffffffu;  // a ticket's chunk index while its job's fields change

 public:
  explicit Pool(int threads) : threads_(threads) {}
  ~Pool() { stop_workers(); }

  int threads() const { return threads_; }

  void set_threads(int n) {
    stop_workers();
    threads_ = n;
  }

  void run(int chunks, ChunkFn fn, const void* body) {
    if (threads_ <= 1 || chunks <= 1) {
      for (int c = 0; c < chunks; c++) fn(body, c);
      return;
    }
    start_workers();
    const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
    ticket_.store(((uint64_t)generation << 32) | kClosed, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);  // the close is seen by whoever sees the new fields
    fn_.store(fn, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    ticket_.store((uint64_t)generation << 32, std::memory_order_release);
    generation_.store(generation);
    if (idle_sleepers_.load() > 0) futex_wake_all(generation_);
    help(generation);
    spin_then_sleep(done_, caller_sleeping_, [&] { return (int)done_.load() == chunks; });
  }

 private:
  // Claims and runs chunks of `generation` until none is left.
  void help(uint32_t generation) {
    uint64_t ticket = ticket_.load(std::memory_order_acquire);
    for (;;) {
      if ((uint32_t)(ticket >> 32) != generation) return;
      const uint32_t chunk = (uint32_t)ticket;
      const int chunks = chunks_.load(std::memory_order_relaxed);
      const ChunkFn fn = fn_.load(std::memory_order_relaxed);
      const void* body = body_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);  // newer fields read above make the swap below fail
      if (chunk >= (uint32_t)chunks) return;
      // Success means the chunk was unclaimed, so the job (and the fields just read) was still this one.
      if (!ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      fn(body, (int)chunk);
      if ((int)done_.fetch_add(1) + 1 == chunks && caller_sleeping_.load() > 0) futex_wake_all(done_);
      ticket = ticket_.load(std::memory_order_acquire);
    }
  }

  // `seen`: the generation before the worker was started (it helps with any job published since).
  void worker_main(uint32_t seen) {
    for (;;) {
      spin_then_sleep(generation_, idle_sleepers_, [&] { return generation_.load() != seen; });
      seen = generation_.load(std::memory_order_acquire);
      if (stopping_.load(std::memory_order_acquire)) return;
      help(seen);
    }
  }

  void start_workers() {
    if (!workers_.empty()) return;
    stopping_.store(false);
    const uint32_t seen = generation_.load();
    for (int i = 1; i < threads_; i++) workers_.emplace_back([this, seen] { worker_main(seen); });
  }

  // Workers are joined before the library can be unloaded (dlclose runs this destructor) or the process ends.
  void stop_workers() {
    if (workers_.empty()) return;
    stopping_.store(true, std::memory_order_release);
    generation_.fetch_add(1);
    futex_wake_all(generation_);
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<const void*> body_{nullptr};
  std::atomic<int> chunks_{0};
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<int> idle_sleepers_{0};
  alignas(64) std::atomic<uint32_t> done_{0};
  std::atomic<int> caller_sleeping_{0};
};

Pool g_pool(cpus_available());

}  // namespace

void run_chunks(int chunks, ChunkFn fn, const void* body) { g_pool.run(chunks, fn, body); }

extern "C" int cpu_pool_check(int jobs) {
  constexpr int kMaxChunks = 64;
  std::atomic<int> runs[kMaxChunks];
  int failures = 0;
  for (int job = 0; job < jobs; job++) {
    const int chunks = 1 + job % kMaxChunks;
    for (int c = 0; c < chunks; c++) runs[c].store(0, std::memory_order_relaxed);
    parallel_chunks(chunks, [&](int c) {
      volatile int spin = 0;  // a few microseconds
      while (spin < 2000 + (job * 7 + c) % 2000) spin = spin + 1;
      runs[c].fetch_add(1, std::memory_order_relaxed);
    });
    for (int c = 0; c < chunks; c++) failures += runs[c].load(std::memory_order_relaxed) != 1;
  }
  return failures;
}

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

namespace {
constexpr uint64_t kTransposeBand = 64;  // input rows transposed together: 64 consecutive writes per output row

// matrix (cols, rows) out-major, from elements [first, first + count) of the input-first (rows, cols) `src`: the
// span's partial first and last rows element by element, the whole rows between a band at a time, column by column.
template <typename E>
void upload_transposed(E* matrix, const E* src, uint64_t first, uint64_t count, uint64_t rows, uint64_t cols) {
  const auto put_span = [&](uint64_t from, uint64_t to) {  // elements [from, to) of one input row
    for (uint64_t i = from; i < to; i++) matrix[(i % cols) * rows + i / cols] = src[i - first];
  };
  const uint64_t end = first + count;
  uint64_t row = (first + cols - 1) / cols;
  if (row * cols >= end) return put_span(first, end);
  put_span(first, row * cols);
  for (; (row + 1) * cols <= end; row += kTransposeBand) {
    const uint64_t band = std::min(kTransposeBand, end / cols - row);
    const E* in = src + (row * cols - first);
    for (uint64_t c = 0; c < cols; c++)
      for (uint64_t r = 0; r < band; r++) matrix[c * rows + row + r] = in[r * cols + c];
    if (band < kTransposeBand) {
      row += band;
      break;
    }
  }
  put_span(row * cols, end);
}
}  // namespace

extern "C" {

int be_init(int device) { return device == 0 ? kOk : fail(kInvalidValue); }

}  // extern "C"

bool cpu_reject_unless(bool supported) {
  if (!supported) fail(kInvalidValue);
  return !supported;
}

extern "C" {

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

void* be_alloc_whole(size_t bytes) {
  void* ptr = be_alloc(bytes);
  if (ptr) madvise(ptr, bytes, MADV_HUGEPAGE);  // advice only: where the kernel has none, 4 KiB pages
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
  uint64_t bytes = 0;
  for (const Mapping& m : g_mapped) bytes += cpu_resident_range_bytes(m.ptr, m.bytes);
  return bytes;
}

// Every page the range touches counts whole: a range that starts mid-page (an arena's sub-buffer) has its
// first page counted with it.
uint64_t cpu_resident_range_bytes(const void* ptr, uint64_t bytes) {
  static std::vector<unsigned char> in_core;
  if (bytes == 0) return 0;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t first = (uintptr_t)ptr & ~(page - 1);
  const size_t pages = (size_t)(((uintptr_t)ptr + bytes - first + page - 1) / page);
  if (in_core.size() < pages) in_core.resize(pages);
  if (mincore((void*)first, pages * page, in_core.data()) != 0) return 0;
  uint64_t resident_pages = 0;
  for (size_t i = 0; i < pages; i++) resident_pages += in_core[i] & 1;
  return resident_pages * page;
}

int be_upload(void* dst, const void* host_src, size_t bytes) {
  memcpy(dst, host_src, bytes);
  return kOk;
}

// The CPU library's matrices are out-major (runtime.h): element (r, c) of the input-first matrix at dst[c · rows + r].
int be_upload_matrix(void* dst, const void* host_src, uint64_t first, uint64_t count, int rows, int cols,
                     int element_bytes) {
  if (rows <= 0 || cols <= 0 || first + count > (uint64_t)rows * cols) return fail(kInvalidValue);
  if (element_bytes == 4)
    upload_transposed(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(host_src), first, count, rows, cols);
  else if (element_bytes == 2)
    upload_transposed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(host_src), first, count, rows, cols);
  else
    return fail(kInvalidValue);
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

int cpu_threads(void) { return g_pool.threads(); }

void cpu_set_threads(int n) {
  if (n > 0) g_pool.set_threads(n);
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

// The read-bandwidth probe's buffer (src/backends/read-probe.ts): huge pages where the kernel gives them, so that
// faulting gigabytes in takes a fraction of a second, then written once by the pool.
int cpu_read_prepare(void* data, uint64_t bytes) {
  if (!data || bytes % sizeof(float) != 0) return kInvalidValue;
  madvise(data, bytes, MADV_HUGEPAGE);  // advice only: without it the pass reads the same bytes
  float* f = static_cast<float*>(data);
  const size_t n = bytes / sizeof(float);
  parallel_chunks(read_chunks(n), [=](int c) { fill_pattern(f, c * kReadChunkFloats, read_chunk_end(c, n)); });
  return kOk;
}

// One pass of the pool's threads over the first `bytes` of the probe's buffer, each chunk summed into independent
// vector accumulators (one would make a core's adds, not the memory, the limit): seconds.
double cpu_read_pass(const void* data, uint64_t bytes) {
  const float* f = static_cast<const float*>(data);
  const size_t n = bytes / sizeof(float);
  const int chunks = read_chunks(n);
  std::vector<float> sums(chunks);
  float* chunk_sums = sums.data();
  const int64_t t0 = now_ns();
  parallel_chunks(chunks, [=](int c) { chunk_sums[c] = sum_floats(f, c * kReadChunkFloats, read_chunk_end(c, n)); });
  const double s = (now_ns() - t0) * 1e-9;
  volatile float sink = 0.0f;
  for (float x : sums) sink = sink + x;
  return s;
}

// fp32 arithmetic peak: chunks of independent FMA chains in the widest vector registers (those the
// micro-kernel uses), a few per thread, all threads at once; best of `iters` passes (FLOP/s). On a shared
// machine a pass only counts when every thread ran it undisturbed: take many short passes.
double cpu_measure_fp32_peak(int iters) {
  constexpr int kChunksPerThread = 4;
  const int chunks = kChunksPerThread * g_pool.threads();
  std::vector<float> results(chunks);
  double best_s = 1e30;
  for (int it = 0; it < iters; it++) {
    const int64_t t0 = now_ns();
    float* out = results.data();
    parallel_chunks(chunks, [=](int c) { out[c] = fma_chains(kPeakSteps); });
    const double s = (now_ns() - t0) * 1e-9;
    if (s < best_s) best_s = s;
  }
  volatile float sink = 0.0f;
  for (float x : results) sink = sink + x;
  return 2.0 * kFmaChains * kVecFloats * (double)kPeakSteps * chunks / best_s;
}

}  // extern "C"
