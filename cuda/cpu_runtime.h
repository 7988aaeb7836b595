// The CPU library's own extras: its threads, per-op timers (the CPU's analogue of CUPTI kernel records)
// and the machine's measured peaks.
#pragma once
#include <stdint.h>

#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

// The clock of the op timers (CLOCK_MONOTONIC, ns), for host intervals on the same axis.
int64_t cpu_now_ns(void);
int cpu_threads(void);
// Bytes of this library's allocations (be_alloc) that are resident in memory.
uint64_t cpu_resident_bytes(void);
// Bytes of [ptr, ptr + bytes), a range inside one of those allocations, that are resident (whole pages).
uint64_t cpu_resident_range_bytes(const void* ptr, uint64_t bytes);
void cpu_set_threads(int n);

// Per-op timers: when enabled, every op_* appends {opcode, start_ns, end_ns} (CLOCK_MONOTONIC).
typedef struct ProfRecord {
  int64_t op;
  int64_t start_ns;
  int64_t end_ns;
} ProfRecord;

// Machine peaks measured on the spot. The read-bandwidth probe's buffer (`bytes` of be_alloc's, a multiple of 4)
// prepared once, then one pass over its first `bytes` timed (seconds); the fp32 FMA rate (FLOP/s).
int cpu_read_prepare(void* data, uint64_t bytes);
double cpu_read_pass(const void* data, uint64_t bytes);
double cpu_measure_fp32_peak(int iters);

// Runs `jobs` jobs of 1..64 chunks of uneven length through the thread pool; returns how many chunks did not
// run exactly once by the time their job returned (0 when the pool is right).
int cpu_pool_check(int jobs);

void prof_enable(int on);
void prof_reset(void);
int prof_count(void);
int prof_dropped(void);
// Copies up to max records (oldest first) as 3 int64 each; returns how many were copied.
int prof_read(int64_t* out, int max);

#ifdef __cplusplus
}

// Below this many multiply-adds (or elements) an op runs on the calling thread: handing out chunks costs
// microseconds, more than such an op takes.
constexpr long kParallelMinWork = 1L << 18;

// The CPU library's threads: the calling thread plus cpu_threads() - 1 pool workers (cpu_runtime.cpp).
// run_chunks(n, fn, body) runs fn(body, chunk) once for every chunk in [0, n) and returns when all have run.
// Chunks are claimed one at a time, in order, by whichever thread comes first, the caller included: a
// worker the OS has not scheduled holds up at most the one chunk it is running, never the ones it has not
// claimed, and the caller alone can run them all. Waiting (idle workers, the caller for the last chunks)
// spins for a few microseconds, then sleeps on a futex. One calling thread at a time; body must not nest.
using ChunkFn = void (*)(const void* body, int chunk);
void run_chunks(int chunks, ChunkFn fn, const void* body);

// parallel_chunks(n, [&](int chunk) { ... }): run_chunks for a lambda.
template <typename Body> void parallel_chunks(int chunks, const Body& body) {
  run_chunks(chunks, [](const void* b, int chunk) { (*static_cast<const Body*>(b))(chunk); }, &body);
}

// Runs body(begin, end) over [0, n) in chunks of `grain` items, in parallel when work >= kParallelMinWork.
template <typename Body> void parallel_range(long n, long grain, long work, const Body& body) {
  if (work < kParallelMinWork || n <= grain) {
    if (n > 0) body(0L, n);
    return;
  }
  const int chunks = (int)((n + grain - 1) / grain);
  parallel_chunks(chunks, [&](int chunk) {
    const long begin = chunk * grain;
    body(begin, begin + grain < n ? begin + grain : n);
  });
}

// Records cpuErrorInvalidValue (be_last_error) for an op asked for what this library does not run (an unknown
// storage type code); returns true when it did, so the op can return without writing anything.
bool cpu_reject_unless(bool supported);

// Times one op for the rest of the enclosing scope (a branch and nothing else when timers are off). Nested
// timers (a fused op's twin calling other ops) record only the outermost.
class OpTimer {
 public:
  explicit OpTimer(OpCode op);
  ~OpTimer();

 private:
  OpCode op_;
  int64_t start_ns_;
};
#endif
