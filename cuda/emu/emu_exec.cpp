// The emulator's execution model: blocks run one after another; a block's threads are fibers that
// meet at block barriers and warp collectives (see cuda_emu.h).
//
// Schedule: with a nonzero seed (emu_set_schedule; the default is kDefaultScheduleSeed) the blocks of a grid
// run in a seeded random order, and a block's threads run in a seeded random order, reshuffled whenever a
// block barrier releases them; seed 0 runs blocks and threads in index order. A missing barrier, or code that
// assumes which block finishes last, then gives a wrong result on the CPU instead of passing by luck.
//
// Fibers switch with a hand-written x86-64 context switch (callee-saved registers + stack pointer),
// about a hundred times cheaper than swapcontext, which makes a system call per switch; other
// architectures fall back to ucontext. Stacks are kStackBytes each with a guard page below, allocated
// once and reused by every block.
#include "cuda_emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

uint3 g_thread_idx;
uint3 g_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;

void set_launch_error(cudaError_t error);  // emu_runtime.cpp keeps the sticky error
extern "C" __attribute__((visibility("hidden"))) void emu_fiber_main();

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimYZ = 65535;
constexpr size_t kStackBytes = 64 * 1024;
constexpr uint64_t kDefaultScheduleSeed = 0x9e3779b97f4a7c15ull;

// ---- the schedule's random order ---------------------------------------------------------------------------
bool g_shuffle = true;  // false: index order
uint64_t g_schedule_rng = kDefaultScheduleSeed;

uint64_t next_random() {  // splitmix64
  uint64_t z = (g_schedule_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A permutation of 0..n-1: identity in index order, else a seeded Fisher-Yates shuffle.
template <typename T> void shuffle_order(T* items, int n) {
  if (!g_shuffle) return;
  for (int i = n - 1; i > 0; i--) {
    const int j = (int)(next_random() % (uint64_t)(i + 1));
    const T tmp = items[i];
    items[i] = items[j];
    items[j] = tmp;
  }
}

// ---- context switch --------------------------------------------------------------------------------------
#if defined(__x86_64__)
struct Context { void* sp = nullptr; };

extern "C" void emu_switch_context(void** save_sp, void* load_sp);
extern "C" void emu_fiber_trampoline();

// emu_switch_context: push the callee-saved registers, save rsp, load the other rsp, pop, return into it.
// emu_fiber_trampoline: a new fiber's first "return" lands here, with rsp 16-byte aligned.
asm(R"(
  .text
  .p2align 4
  .hidden emu_switch_context
  .type emu_switch_context, @function
emu_switch_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch_context, .-emu_switch_context

  .p2align 4
  .hidden emu_fiber_trampoline
  .type emu_fiber_trampoline, @function
emu_fiber_trampoline:
  call emu_fiber_main
  ud2
  .size emu_fiber_trampoline, .-emu_fiber_trampoline
)");

constexpr int kSavedRegisters = 6;

void context_init(Context* ctx, char* stack_top) {
  // (stack_top - 72) % 16 == 8: after popping 6 registers and the return address, rsp is 16-byte aligned
  // at the trampoline's call, as the ABI wants.
  void** sp = reinterpret_cast<void**>(stack_top - (kSavedRegisters + 3) * sizeof(void*));
  for (int i = 0; i < kSavedRegisters; i++) sp[i] = nullptr;
  sp[kSavedRegisters] = reinterpret_cast<void*>(&emu_fiber_trampoline);
  ctx->sp = sp;
}
void context_switch(Context* from, Context* to) { emu_switch_context(&from->sp, to->sp); }
#else
struct Context { ucontext_t uc; };
void context_init(Context* ctx, char* stack_top) {
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = stack_top - kStackBytes;
  ctx->uc.uc_stack.ss_size = kStackBytes;
  ctx->uc.uc_link = nullptr;
  makecontext(&ctx->uc, emu_fiber_main, 0);
}
void context_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// ---- fibers and the block scheduler ------------------------------------------------------------------------
enum class FiberState { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  Context ctx;
  FiberState state = FiberState::kReady;
  uint3 idx{0, 0, 0};
};

// One warp's collective in progress: lanes deposit a value and a source lane; the last to arrive
// resolves every lane's result.
struct WarpCollective {
  unsigned mask = 0;
  unsigned arrived = 0;  // bit per lane
  bool mask_mismatch = false;
  uint64_t value[kWarpSize];
  int src[kWarpSize];
  uint64_t result[kWarpSize];
};

struct StackPool {
  char* base = nullptr;
  size_t slot_bytes = 0;

  char* top(int i) const { return base + (size_t)(i + 1) * slot_bytes; }
  // Maps the stacks on first use; false if that failed.
  bool ready() {
    if (base) return true;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    slot_bytes = kStackBytes + page;  // a guard page below each stack
    void* p = mmap(nullptr, slot_bytes * kMaxThreadsPerBlock, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base = static_cast<char*>(p);
    for (int i = 0; i < kMaxThreadsPerBlock; i++) mprotect(base + (size_t)i * slot_bytes, page, PROT_NONE);
    return true;
  }
};

struct Block {
  const KernelBody* body = nullptr;
  int n_threads = 0;
  int current = -1;      // the running fiber
  int current_pos = -1;  // its position in `order`
  int done = 0;
  int at_block_barrier = 0;
  bool failed = false;
  Context scheduler;
  Fiber fibers[kMaxThreadsPerBlock];
  int order[kMaxThreadsPerBlock];  // the order a pass over the block runs its ready fibers in
  WarpCollective warps[kMaxThreadsPerBlock / kWarpSize];
};

Block g_block;
StackPool g_stacks;

// Leaves the running fiber (or the scheduler, from_pos == -1) for the next ready fiber after position
// `from_pos` of the block's order, or for the scheduler when there is none: fibers hand over to each other
// directly, one switch per yield.
void switch_from(Context* self, int from_pos, bool from_scheduler) {
  for (int p = from_pos + 1; p < g_block.n_threads; p++) {
    const int t = g_block.order[p];
    if (g_block.fibers[t].state != FiberState::kReady) continue;
    g_block.current = t;
    g_block.current_pos = p;
    g_thread_idx = g_block.fibers[t].idx;
    context_switch(self, &g_block.fibers[t].ctx);
    return;
  }
  if (!from_scheduler) context_switch(self, &g_block.scheduler);
}

void yield(FiberState state) {
  Fiber& self = g_block.fibers[g_block.current];
  self.state = state;
  switch_from(&self.ctx, g_block.current_pos, false);
}

bool any_ready() {
  for (int t = 0; t < g_block.n_threads; t++)
    if (g_block.fibers[t].state == FiberState::kReady) return true;
  return false;
}

// Every thread is at the barrier: all go on, in a fresh order (the releasing thread runs on first).
void release_block_barrier() {
  for (int t = 0; t < g_block.n_threads; t++)
    if (g_block.fibers[t].state == FiberState::kAtBlockBarrier) g_block.fibers[t].state = FiberState::kReady;
  g_block.at_block_barrier = 0;
  shuffle_order(g_block.order, g_block.n_threads);
  g_block.current_pos = -1;  // its next yield hands over to the first ready fiber of the new order
}

unsigned lanes_present(int warp) {
  int lanes = g_block.n_threads - warp * kWarpSize;
  return lanes >= kWarpSize ? kFullMask : (1u << lanes) - 1;
}

// Runs every thread of the current block to completion; false if the block got stuck.
bool run_block() {
  g_block.done = 0;
  g_block.at_block_barrier = 0;
  for (int t = 0; t < g_block.n_threads; t++) {
    g_block.fibers[t].state = FiberState::kReady;
    context_init(&g_block.fibers[t].ctx, g_stacks.top(t));
    g_block.order[t] = t;
  }
  shuffle_order(g_block.order, g_block.n_threads);
  for (auto& w : g_block.warps) w.arrived = 0, w.mask_mismatch = false;
  // each pass runs the ready fibers in the block's order until none after the last one is ready
  while (g_block.done < g_block.n_threads) {
    if (g_block.failed || !any_ready()) return false;  // every live thread waits on a barrier that cannot complete
    switch_from(&g_block.scheduler, -1, true);
  }
  return !g_block.failed;
}

void set_fiber_indices(dim3 block) {
  int t = 0;
  for (unsigned z = 0; z < block.z; z++)
    for (unsigned y = 0; y < block.y; y++)
      for (unsigned x = 0; x < block.x; x++) g_block.fibers[t++].idx = uint3{x, y, z};
}

bool valid_configuration(dim3 grid, dim3 block) {
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  return threads >= 1 && threads <= kMaxThreadsPerBlock && block.z <= kMaxBlockDimZ && grid.x >= 1 && grid.y >= 1 &&
         grid.z >= 1 && grid.y <= kMaxGridDimYZ && grid.z <= kMaxGridDimYZ;
}

}  // namespace

// Every fiber starts here (through emu_fiber_trampoline): run the kernel body, then hand back for good.
extern "C" __attribute__((visibility("hidden"))) void emu_fiber_main() {
  (*g_block.body)();
  g_block.fibers[g_block.current].state = FiberState::kDone;
  g_block.done++;
  Context dead;
  switch_from(&dead, g_block.current_pos, false);  // never resumed
}

void block_barrier() {
  if (++g_block.at_block_barrier == g_block.n_threads) {
    release_block_barrier();  // the last thread to arrive goes on without yielding
    return;
  }
  yield(FiberState::kAtBlockBarrier);
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane) {
  const int t = g_block.current;
  const int warp = t / kWarpSize;
  const int lane = t % kWarpSize;
  WarpCollective& w = g_block.warps[warp];
  const unsigned participants = mask & lanes_present(warp);
  if (w.arrived == 0) w.mask = participants;
  if (w.mask != participants || !(participants >> lane & 1u)) w.mask_mismatch = true;
  w.value[lane] = value;
  w.src[lane] = src_lane;
  w.arrived |= 1u << lane;
  if (w.arrived != w.mask) {
    yield(FiberState::kAtWarpBarrier);
    return w.result[lane];
  }
  // last lane: resolve the collective for every lane, then release them
  if (w.mask_mismatch) g_block.failed = true;
  for (int l = 0; l < kWarpSize; l++) {
    if (!(w.mask >> l & 1u)) continue;
    int src = w.src[l];
    bool from_peer = src >= 0 && src < kWarpSize && (w.mask >> src & 1u);
    w.result[l] = from_peer ? w.value[src] : w.value[l];
    if (l != lane) g_block.fibers[warp * kWarpSize + l].state = FiberState::kReady;
  }
  w.arrived = 0;
  w.mask_mismatch = false;
  return w.result[lane];
}

void run_launch(dim3 grid, dim3 block, const KernelBody& body) {
  if (!valid_configuration(grid, block)) {
    set_launch_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (!g_stacks.ready()) {
    set_launch_error(cudaErrorMemoryAllocation);
    return;
  }
  g_block.body = &body;
  g_block.n_threads = (int)(block.x * block.y * block.z);
  g_block.failed = false;
  g_block_dim = block;
  g_grid_dim = grid;
  set_fiber_indices(block);
  std::vector<uint3> blocks;
  blocks.reserve((size_t)grid.x * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) blocks.push_back(uint3{x, y, z});
  shuffle_order(blocks.data(), (int)blocks.size());
  for (const uint3& b : blocks) {
    g_block_idx = b;
    if (!run_block()) {
      set_launch_error(cudaErrorLaunchFailure);
      return;
    }
  }
}

}  // namespace emu

// The schedule of every later launch: 0 runs blocks and threads in index order, any other seed in that seed's
// random order.
extern "C" void emu_set_schedule(uint64_t seed) {
  emu::g_shuffle = seed != 0;
  emu::g_schedule_rng = seed;
}
