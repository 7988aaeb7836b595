// The CPU library's own extras: thread count and per-op timers (the CPU's analogue of CUPTI kernel records).
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
void cpu_set_threads(int n);

// Per-op timers: when enabled, every op_* appends {opcode, start_ns, end_ns} (CLOCK_MONOTONIC).
typedef struct ProfRecord {
  int64_t op;
  int64_t start_ns;
  int64_t end_ns;
} ProfRecord;

// Machine peaks measured on the spot: read bandwidth (bytes/s) and fp32 FMA rate (FLOP/s).
double cpu_measure_read_bandwidth(uint64_t bytes, int iters);
double cpu_measure_fp32_peak(int iters);

void prof_enable(int on);
void prof_reset(void);
int prof_count(void);
int prof_dropped(void);
// Copies up to max records (oldest first) as 3 int64 each; returns how many were copied.
int prof_read(int64_t* out, int max);

#ifdef __cplusplus
}

// Below this many multiply-adds (or elements) an op runs on the calling thread. Waking the team costs
// microseconds, and under load (other processes on the cores) a team waits at every barrier for a thread
// the OS has not scheduled: a small op must not pay a scheduler quantum. (libgomp's dynamic teams were
// tried: they size teams by the 1-minute load average, which lags, and halved the speed after any busy minute.)
constexpr long kParallelMinWork = 1L << 18;

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
