// The cross-block synchronisation of the persistent step (cuda/persistent.cu persistent_step_kernel) as a Relacy
// model (Dmitry Vyukov's Relacy Race Detector, Debian's relacy-dev), checked under the C++11 relaxed memory model:
// the CPU emulator runs its fibers one at a time, sequentially consistently, so it cannot catch a missing order.
// Relacy reports a data race on every plain access (rl::var) that no happens-before orders against a conflicting
// one, whichever values the run happened to read.
//
// kBlocks blocks of kThreads threads run kTasks = 2 tasks:
//   task 0: every thread writes an output and a partial (scratch); the blocks merge the partials (arrive_last), the
//           last block writing the merged result; grid barrier (grid_arrive, then the next task's wait_for_inputs);
//   task 1: every thread checks the merged result and the other blocks' outputs of task 0, then writes partials
//           into the same scratch and merges them on the same counter (reset by task 0's last block);
//   end:    every block departs (arrive_last on departures); the last one's thread 0 resets arrivals for the next
//           launch. after() checks that every counter is zero again.
//
// The orders default to the CUDA code's (test/grid-sync-relacy.test.ts checks that cuda/launch.h and
// cuda/last_block.h still use them); a -D of one of the *_ORDER macros plants a weaker one, which Relacy must reject.
#include <relacy/relacy.hpp>

#ifndef GRID_ARRIVE_ORDER  // grid_arrive: thread 0 counts its block in on arrivals
#define GRID_ARRIVE_ORDER rl::mo_release
#endif
#ifndef GRID_POLL_ORDER  // grid_wait: thread 0 polls arrivals
#define GRID_POLL_ORDER rl::mo_acquire
#endif
#ifndef MERGE_COUNT_ORDER  // arrive_last: thread 0 counts its block in on the group's counter
#define MERGE_COUNT_ORDER rl::mo_acq_rel
#endif
#ifndef MERGE_RESET_ORDER  // arrive_last: the last block's thread 0 zeroes the counter
#define MERGE_RESET_ORDER rl::mo_relaxed
#endif

constexpr unsigned kBlocks = 2, kThreads = 2, kTasks = 2;

// Task k's partial (and task 0's output) of thread t of block b: distinct, so a stale or mixed read shows.
constexpr int value(unsigned task, unsigned b, unsigned t) { return int(100 * task + 10 * b + t + 1); }
// what the merge of task k leaves in column t: the sum over the blocks
constexpr int merged_value(unsigned task, unsigned t) {
  int sum = 0;
  for (unsigned b = 0; b < kBlocks; b++) sum += value(task, b, t);
  return sum;
}

// One thread of the grid: its block, its index in the block, and the __syncthreads it has passed.
struct Thread {
  unsigned block, thread;
  unsigned syncs = 0;
};

struct GridSync : rl::test_suite<GridSync, kBlocks * kThreads> {
  // __syncthreads (PTX bar.sync) per block: the block's arrivals so far, only growing; a thread at its n-th barrier
  // waits for n x kThreads. acq_rel counts and acquire polls, which is all the CTA barrier promises.
  rl::atomic<unsigned> cta_arrivals[kBlocks];
  // StepBarrier (cuda/persistent.h) and the merge's arrival counter (OpScratch's counters, cuda/last_block.h)
  rl::atomic<unsigned> arrivals, departures, merge_count;
  // The kernel resets arrivals with a plain store, which rl::atomic cannot take: every access of arrivals is followed
  // by a read of this plain twin and the reset writes it, so an access the reset is not ordered after is a data race.
  rl::var<unsigned> arrivals_plain;
  rl::var<bool> is_last[kBlocks];           // arrive_last's __shared__ flag, per block
  rl::var<int> output[kBlocks][kThreads];   // task 0's outputs, read by the other blocks in task 1
  rl::var<int> partial[kBlocks][kThreads];  // the merge's scratch, reused by every task
  rl::var<int> merged[kTasks][kThreads];    // the last block's merged result, per task

  void before() {
    for (auto& count : cta_arrivals) count($).store(0, rl::mo_relaxed);
    arrivals($).store(0, rl::mo_relaxed);
    departures($).store(0, rl::mo_relaxed);
    merge_count($).store(0, rl::mo_relaxed);
    arrivals_plain($) = 0;
    for (auto& flag : is_last) flag($) = false;
    for (unsigned b = 0; b < kBlocks; b++)
      for (unsigned t = 0; t < kThreads; t++) output[b][t]($) = partial[b][t]($) = 0;
    for (auto& row : merged)
      for (auto& m : row) m($) = 0;
  }

  void syncthreads(Thread& self) {
    const unsigned target = ++self.syncs * kThreads;
    rl::atomic<unsigned>& count = cta_arrivals[self.block];
    if (count($).fetch_add(1, rl::mo_acq_rel) + 1 == target) return;
    while (count($).load(rl::mo_acquire) < target) rl::yield(1, $);
  }

  void touch_arrivals() { (void)unsigned(arrivals_plain($)); }

  // cuda/last_block.h arrive_last
  bool arrive_last(Thread& self, rl::atomic<unsigned>& counter) {
    syncthreads(self);
    if (self.thread == 0) {
      const bool last = counter($).fetch_add(1, MERGE_COUNT_ORDER) + 1 == kBlocks;
      is_last[self.block]($) = last;
      if (last) counter($).store(0, MERGE_RESET_ORDER);
    }
    syncthreads(self);
    return is_last[self.block]($);
  }

  // cuda/launch.h grid_arrive
  void grid_arrive(Thread& self) {
    syncthreads(self);
    if (self.thread != 0) return;
    arrivals($).fetch_add(1, GRID_ARRIVE_ORDER);
    touch_arrivals();
  }

  // cuda/launch.h wait_for_inputs and grid_wait; the poll's sleep is a yield, and grid_wait's CTA fence before the
  // poll is left out (it only adds order)
  void wait_for_inputs(Thread& self, unsigned needed) {
    syncthreads(self);
    if (self.thread == 0) {
      while (arrivals($).load(GRID_POLL_ORDER) < needed) rl::yield(1, $);
      touch_arrivals();
    }
    syncthreads(self);
  }

  // A task's partials, merged by the last block to arrive: each of its threads sums one column over the blocks.
  void merge(Thread& self, unsigned task) {
    partial[self.block][self.thread]($) = value(task, self.block, self.thread);
    if (!arrive_last(self, merge_count)) return;
    int sum = 0;
    for (unsigned b = 0; b < kBlocks; b++) sum += partial[b][self.thread]($);
    merged[task][self.thread]($) = sum;
  }

  void check_task0(const Thread& self) {
    for (unsigned t = 0; t < kThreads; t++) RL_ASSERT(merged[0][t]($) == merged_value(0, t));
    const unsigned other = (self.block + 1) % kBlocks;
    RL_ASSERT(output[other][self.thread]($) == value(0, other, self.thread));
  }

  void thread(unsigned index) {
    Thread self{index / kThreads, index % kThreads};
    output[self.block][self.thread]($) = value(0, self.block, self.thread);
    merge(self, 0);
    grid_arrive(self);
    wait_for_inputs(self, 1 * kBlocks);
    check_task0(self);
    merge(self, 1);  // the last task: nothing waits for it, so no arrival after it (persistent_step_kernel)
    if (arrive_last(self, departures) && self.thread == 0) {
      arrivals($).store(0, rl::mo_relaxed);
      arrivals_plain($) = 0;
    }
  }

  // after the launch: the merged result of the last task, and every counter back at zero for the next launch
  void after() {
    for (unsigned t = 0; t < kThreads; t++) RL_ASSERT(merged[1][t]($) == merged_value(1, t));
    RL_ASSERT(arrivals($).load(rl::mo_relaxed) == 0);
    RL_ASSERT(departures($).load(rl::mo_relaxed) == 0);
    RL_ASSERT(merge_count($).load(rl::mo_relaxed) == 0);
  }
};

// Relacy's random scheduler seeds each iteration with its index, so every run explores the same schedules (and the
// same stale reads of relaxed loads, which its exhaustive schedulers look at most one store back for). They cannot
// finish here: every spinning thread's yield is a branch of their search tree.
constexpr rl::iteration_t kIterations = 100000;

// Exit status 0 when Relacy finds nothing in kIterations runs, 1 with its report (on stdout) otherwise.
int main() {
  rl::test_params params;
  params.search_type = rl::sched_random;
  params.iteration_count = kIterations;
  return rl::simulate<GridSync>(params) ? 0 : 1;
}
