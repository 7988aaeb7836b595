// The emulator's execution model: a launch's blocks run one after another, or, in a cooperative launch,
// all at once, switching at grid-barrier waits; a block's threads are fibers that meet at block barriers and
// warp collectives (see cuda_emu.h).
//
// Schedule: with a nonzero seed (emu_set_schedule; the default is kDefaultScheduleSeed) the blocks of a grid
// run in a seeded random order, and a block's threads run in a seeded random order, reshuffled whenever a
// block barrier releases them; seed 0 runs blocks and threads in index order. A missing barrier, or code that
// assumes which block finishes last, then gives a wrong result on the CPU instead of passing by luck.
//
// Cooperative launches (emu_launch_cooperative): every block is resident at once, with its own fibers and
// stacks, so the whole grid gets at most kMaxThreadsPerBlock threads (the stacks there are). A block runs until
// it finishes or until its only unfinished business is a wait in wait_until_at_least (a grid barrier) that
// its own threads cannot end; then the scheduler picks the next block among those that can make progress
// (index order with seed 0, else a seeded random one). Blocks therefore interleave only at such waits, which
// is why atomics and __threadfence() stay exact: nothing runs between the read and the write of an atomic, and
// every write is visible to whatever runs after it. When no block can make progress (every unfinished
// thread waits for a condition nobody can make true, or at a barrier some threads never reach) the launch
// fails with cudaErrorLaunchFailure instead of hanging.
//
// Shared memory: every resident block has its own static area (the variables a launch uses, placed at their first
// use: emu::block_shared) and dynamic area (the launch's bytes), poisoned when the launch places them; blocks run
// one after another share one, so a block finds what the block before it left, as on a GPU's multiprocessor. The
// scheduler points emu::g_static_shared and g_dynamic_shared at the running block's before it resumes the block.
//
// Fibers switch with a hand-written x86-64 context switch (callee-saved registers + stack pointer),
// about a hundred times cheaper than swapcontext, which makes a system call per switch; other
// architectures fall back to ucontext. Stacks are kStackBytes each with a guard page below, allocated
// once and reused by every launch.
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
unsigned char* g_static_shared = nullptr;
unsigned char* g_dynamic_shared = nullptr;
uint64_t g_launch_number = 0;

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
struct Context {
  void* sp = nullptr;
};

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
struct Context {
  ucontext_t uc;
};
void context_init(Context* ctx, char* stack_top) {
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = stack_top - kStackBytes;
  ctx->uc.uc_stack.ss_size = kStackBytes;
  ctx->uc.uc_link = nullptr;
  makecontext(&ctx->uc, emu_fiber_main, 0);
}
void context_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// ---- fibers and blocks --------------------------------------------------------------------------------------
enum class FiberState { kReady, kAtBlockBarrier, kAtWarpBarrier, kWaiting, kDone };

struct Fiber {
  Context ctx;
  FiberState state = FiberState::kReady;
  uint3 idx{0, 0, 0};
};

// A kWaiting fiber's condition, beside the fibers rather than in them: the passes over a block's fibers read
// only their states, and stay as compact as before waits existed.
struct Wait {
  const unsigned* counter = nullptr;  // until *counter >= target
  unsigned target = 0;
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

// The resident blocks' shared memory, one slice per block, each its static area then its dynamic area, page-aligned;
// mapped for the largest launch yet, touched only where poisoned: a slice's dynamic area when the launch starts,
// a variable in every slice when the launch places it (place_shared).
struct SharedPool {
  unsigned char* base = nullptr;
  size_t mapped = 0;
  size_t slice_bytes = 0;    // this launch's, per resident block
  size_t dynamic_bytes = 0;  // this launch's dynamic shared memory per block
  int slices = 0;            // this launch's resident blocks
  size_t static_used = 0;    // bytes of the static area this launch has placed so far

  unsigned char* static_area(int slice) const { return base + (size_t)slice * slice_bytes; }
  unsigned char* dynamic_area(int slice) const { return static_area(slice) + kStaticSharedBytes; }
  // Maps and poisons the slices of a launch of `n` resident blocks; false if that failed.
  bool ready(int n, size_t dynamic);
};
constexpr unsigned char kSharedPoison = 0xff;  // NaN as a float, -1 as an integer

bool SharedPool::ready(int n, size_t dynamic) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  slice_bytes = (kStaticSharedBytes + dynamic + page - 1) / page * page;
  dynamic_bytes = dynamic;
  slices = n;
  static_used = 0;
  const size_t need = slice_bytes * (size_t)n;
  if (need > mapped) {
    if (base) munmap(base, mapped);
    void* p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    mapped = base ? need : 0;
    if (!base) return false;
  }
  for (int slice = 0; slice < n; slice++) memset(dynamic_area(slice), kSharedPoison, dynamic);
  return true;
}

// One slot per stack: the resident blocks (one at a time, or all of a cooperative launch) take consecutive
// slices of the fibers and their run orders. A block of n threads has ceil(n / 32) <= n warps, so the warps
// of kMaxThreadsPerBlock threads in blocks of any size fit kMaxThreadsPerBlock collectives.
Fiber g_fibers[kMaxThreadsPerBlock];
Wait g_waits[kMaxThreadsPerBlock];
int g_orders[kMaxThreadsPerBlock];
WarpCollective g_warps[kMaxThreadsPerBlock];
StackPool g_stacks;
SharedPool g_shared;

struct Block {
  uint3 idx{0, 0, 0};
  int n_threads = 0;
  int first_slot = 0;                      // its fibers' stack slots are first_slot .. first_slot + n_threads - 1
  unsigned char* static_shared = nullptr;  // its slice of g_shared
  unsigned char* dynamic_shared = nullptr;
  Fiber* fibers = nullptr;
  Wait* waits = nullptr;  // waits[t]: fibers[t]'s
  int* order = nullptr;   // the order a pass over the block runs its ready fibers in
  WarpCollective* warps = nullptr;
  int current = -1;      // the running fiber
  int current_pos = -1;  // its position in `order`
  int done = 0;
  int at_block_barrier = 0;
  int waiting = 0;  // fibers in wait_until_at_least
  bool failed = false;
};

const KernelBody* g_body = nullptr;
// The running block, copied in and back out by resume_block: at a fixed address, the hot paths (barriers,
// collectives, fiber switches) reach its fields without first loading a pointer to it.
Block g_block;
Context g_scheduler;

int warps_in(int n_threads) { return (n_threads + kWarpSize - 1) / kWarpSize; }

// Gives the block the `slice`-th slice of fibers, orders, warps and shared memory, with the thread indices of `shape`.
void place_block(Block& b, int slice, dim3 shape) {
  b.n_threads = (int)(shape.x * shape.y * shape.z);
  b.first_slot = slice * b.n_threads;
  b.static_shared = g_shared.static_area(slice);
  b.dynamic_shared = g_shared.dynamic_area(slice);
  b.fibers = g_fibers + b.first_slot;
  b.waits = g_waits + b.first_slot;
  b.order = g_orders + b.first_slot;
  b.warps = g_warps + slice * warps_in(b.n_threads);
  int t = 0;
  for (unsigned z = 0; z < shape.z; z++)
    for (unsigned y = 0; y < shape.y; y++)
      for (unsigned x = 0; x < shape.x; x++) b.fibers[t++].idx = uint3{x, y, z};
}

// Sets the placed block up as block `idx` at its start: every fiber ready at the kernel's entry, in a fresh order.
void start_block(Block& b, uint3 idx) {
  b.idx = idx;
  b.current = b.current_pos = -1;
  b.done = b.at_block_barrier = b.waiting = 0;
  b.failed = false;
  for (int t = 0; t < b.n_threads; t++) {
    b.fibers[t].state = FiberState::kReady;
    context_init(&b.fibers[t].ctx, g_stacks.top(b.first_slot + t));
    b.order[t] = t;
  }
  shuffle_order(b.order, b.n_threads);
  for (int w = 0; w < warps_in(b.n_threads); w++) b.warps[w].arrived = 0, b.warps[w].mask_mismatch = false;
}

// Leaves the running fiber (or the scheduler, from_pos == -1) for the next ready fiber of the running block
// after position `from_pos` of its order, or for the scheduler when there is none: fibers hand over to each
// other directly, one switch per yield.
void switch_from(Context* self, int from_pos, bool from_scheduler) {
  Block& b = g_block;
  for (int p = from_pos + 1; p < b.n_threads; p++) {
    const int t = b.order[p];
    if (b.fibers[t].state != FiberState::kReady) continue;
    b.current = t;
    b.current_pos = p;
    g_thread_idx = b.fibers[t].idx;
    context_switch(self, &b.fibers[t].ctx);
    return;
  }
  if (!from_scheduler) context_switch(self, &g_scheduler);
}

void yield(FiberState state) {
  Fiber& self = g_block.fibers[g_block.current];
  self.state = state;
  switch_from(&self.ctx, g_block.current_pos, false);
}

bool wait_over(const Block& b, int t) {
  return b.fibers[t].state == FiberState::kWaiting && *b.waits[t].counter >= b.waits[t].target;
}

bool any_ready(const Block& b) {
  for (int t = 0; t < b.n_threads; t++)
    if (b.fibers[t].state == FiberState::kReady) return true;
  return false;
}

bool any_wait_over(const Block& b) {
  if (b.waiting == 0) return false;
  for (int t = 0; t < b.n_threads; t++)
    if (wait_over(b, t)) return true;
  return false;
}

// Makes ready the block's fibers whose wait is over; false if there were none.
bool wake_waiters(Block& b) {
  if (!any_wait_over(b)) return false;
  for (int t = 0; t < b.n_threads; t++) {
    if (!wait_over(b, t)) continue;
    b.fibers[t].state = FiberState::kReady;
    b.waiting--;
  }
  return true;
}

// Every thread is at the barrier: all go on, in a fresh order (the releasing thread runs on first).
void release_block_barrier(Block& b) {
  for (int t = 0; t < b.n_threads; t++)
    if (b.fibers[t].state == FiberState::kAtBlockBarrier) b.fibers[t].state = FiberState::kReady;
  b.at_block_barrier = 0;
  shuffle_order(b.order, b.n_threads);
  b.current_pos = -1;  // its next yield hands over to the first ready fiber of the new order
}

unsigned lanes_present(int warp) {
  int lanes = g_block.n_threads - warp * kWarpSize;
  return lanes >= kWarpSize ? kFullMask : (1u << lanes) - 1;
}

enum class Progress { kFinished, kParked, kStuck };

// Runs the running block's ready fibers, pass after pass in its order, waking the fibers whose wait is over
// when none is ready, until it finishes (kFinished) or can go no further: kParked while some fiber waits in
// wait_until_at_least (another block may end that wait), kStuck when the rest wait at barriers that can no
// longer complete or a warp collective was misused.
Progress run_block() {
  Block& b = g_block;
  while (b.done < b.n_threads) {
    if (b.failed) return Progress::kStuck;
    if (!any_ready(b) && !wake_waiters(b)) return b.waiting > 0 ? Progress::kParked : Progress::kStuck;
    switch_from(&g_scheduler, -1, true);
  }
  return b.failed ? Progress::kStuck : Progress::kFinished;
}

Progress resume_block(Block& b) {
  g_block = b;
  g_block_idx = b.idx;  // g_block_dim and g_grid_dim are the launch's, set once
  g_static_shared = b.static_shared;
  g_dynamic_shared = b.dynamic_shared;
  const Progress progress = run_block();
  b = g_block;
  return progress;
}

std::vector<uint3> block_indices(dim3 grid) {
  std::vector<uint3> blocks;
  blocks.reserve((size_t)grid.x * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) blocks.push_back(uint3{x, y, z});
  return blocks;
}

// A normal launch: each block runs to completion in one slice of fibers, in the schedule's order. A wait that
// the block's own threads do not end can never end (no other block runs meanwhile), so it fails the launch.
bool run_one_after_another(dim3 grid, dim3 shape) {
  std::vector<uint3> indices = block_indices(grid);
  shuffle_order(indices.data(), (int)indices.size());
  Block b;
  place_block(b, 0, shape);
  for (const uint3& idx : indices) {
    start_block(b, idx);
    if (resume_block(b) != Progress::kFinished) return false;
  }
  return true;
}

bool can_progress(const Block& b) { return b.done < b.n_threads && (any_ready(b) || any_wait_over(b)); }

// One of the blocks that can make progress, the first in index order or a seeded random one; null if none can.
Block* next_block(std::vector<Block>& blocks, std::vector<Block*>& runnable) {
  runnable.clear();
  for (Block& b : blocks)
    if (can_progress(b)) runnable.push_back(&b);
  if (runnable.empty()) return nullptr;
  return runnable[g_shuffle ? next_random() % runnable.size() : 0];
}

// A cooperative launch: every block resident in its own slice, resumed by the scheduler whenever it can make
// progress, until all finish or none can make progress.
bool run_coresident(dim3 grid, dim3 shape) {
  const std::vector<uint3> indices = block_indices(grid);
  std::vector<Block> blocks(indices.size());
  for (size_t i = 0; i < blocks.size(); i++) {
    place_block(blocks[i], (int)i, shape);
    start_block(blocks[i], indices[i]);
  }
  std::vector<Block*> runnable;
  size_t finished = 0;
  while (Block* b = next_block(blocks, runnable)) {
    const Progress progress = resume_block(*b);
    if (progress == Progress::kStuck) return false;
    if (progress == Progress::kFinished) finished++;
  }
  return finished == blocks.size();  // otherwise every unfinished block waits for what nobody can do
}

bool valid_configuration(dim3 grid, dim3 block) {
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  return threads >= 1 && threads <= kMaxThreadsPerBlock && block.z <= kMaxBlockDimZ && grid.x >= 1 && grid.y >= 1 &&
         grid.z >= 1 && grid.y <= kMaxGridDimYZ && grid.z <= kMaxGridDimYZ;
}

}  // namespace

// Every fiber starts here (through emu_fiber_trampoline): run the kernel body, then hand back for good.
extern "C" __attribute__((visibility("hidden"))) void emu_fiber_main() {
  (*g_body)();
  g_block.fibers[g_block.current].state = FiberState::kDone;
  g_block.done++;
  Context dead;
  switch_from(&dead, g_block.current_pos, false);  // never resumed
}

void block_barrier() {
  if (++g_block.at_block_barrier == g_block.n_threads) {
    release_block_barrier(g_block);  // the last thread to arrive goes on without yielding
    return;
  }
  yield(FiberState::kAtBlockBarrier);
}

void wait_until_at_least(const unsigned* counter, unsigned target) {
  while (*counter < target) {  // rechecked: the fiber runs again after its wake, not at it
    g_block.waits[g_block.current] = Wait{counter, target};
    g_block.waiting++;
    yield(FiberState::kWaiting);
  }
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane) {
  Block& b = g_block;
  const int t = b.current;
  const int warp = t / kWarpSize;
  const int lane = t % kWarpSize;
  WarpCollective& w = b.warps[warp];
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
  if (w.mask_mismatch) b.failed = true;
  for (int l = 0; l < kWarpSize; l++) {
    if (!(w.mask >> l & 1u)) continue;
    int src = w.src[l];
    bool from_peer = src >= 0 && src < kWarpSize && (w.mask >> src & 1u);
    w.result[l] = from_peer ? w.value[src] : w.value[l];
    if (l != lane) b.fibers[warp * kWarpSize + l].state = FiberState::kReady;
  }
  w.arrived = 0;
  w.mask_mismatch = false;
  return w.result[lane];
}

size_t place_shared(size_t bytes, size_t align) {
  const size_t offset = (g_shared.static_used + align - 1) / align * align;
  if (offset + bytes > kStaticSharedBytes) {
    g_block.failed = true;
    return 0;
  }
  g_shared.static_used = offset + bytes;
  for (int slice = 0; slice < g_shared.slices; slice++)
    memset(g_shared.static_area(slice) + offset, kSharedPoison, bytes);
  return offset;
}

int cooperative_max_blocks(int block_threads) {
  return block_threads >= 1 && block_threads <= kMaxThreadsPerBlock ? kMaxThreadsPerBlock / block_threads : 0;
}

void run_launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const KernelBody& body, bool cooperative) {
  if (!valid_configuration(grid, block)) {
    set_launch_error(cudaErrorInvalidConfiguration);
    return;
  }
  const uint64_t n_blocks = (uint64_t)grid.x * grid.y * grid.z;
  if (cooperative && n_blocks > (uint64_t)cooperative_max_blocks((int)(block.x * block.y * block.z))) {
    set_launch_error(cudaErrorCooperativeLaunchTooLarge);
    return;
  }
  if (!g_stacks.ready() || !g_shared.ready(cooperative ? (int)n_blocks : 1, dynamic_shared_bytes)) {
    set_launch_error(cudaErrorMemoryAllocation);
    return;
  }
  g_launch_number++;  // every block_shared variable is placed anew
  g_body = &body;
  g_block_dim = block;
  g_grid_dim = grid;
  if (!(cooperative ? run_coresident(grid, block) : run_one_after_another(grid, block)))
    set_launch_error(cudaErrorLaunchFailure);
}

}  // namespace emu

// The schedule of every later launch: 0 runs blocks and threads in index order, any other seed in that seed's
// random order.
extern "C" void emu_set_schedule(uint64_t seed) {
  emu::g_shuffle = seed != 0;
  emu::g_schedule_rng = seed;
}
