// A small emulation of the CUDA execution model and runtime API, force-included (g++ -include) before
// every cuda/*.cu when building libgpt2_emu.so, so the kernels' own code runs on the CPU.
//
// Execution model (cuda/emu/emu_exec.cpp): a launch runs its blocks one after another; a block's threads
// are cooperative fibers on small reused stacks. A fiber runs until it reaches __syncthreads() (block
// barrier), a warp collective (__shfl_*_sync, __syncwarp: a barrier among the warp's lanes) or
// emu::wait_until_at_least; the last thread to arrive at a barrier releases the others. Blocks, and a block's
// threads between barriers, run in a seeded random order (emu_set_schedule(seed); 0 = index order), so code
// that needs a missing barrier or assumes which block arrives last fails here.
// A cooperative launch (emu_launch_cooperative: all blocks co-resident, as cudaLaunchCooperativeKernel) keeps
// every block's fibers alive at once, at most 1024 threads in the whole grid (emu::cooperative_max_blocks), and
// switches to another block, picked in the same seeded order, when a block can go no further than a wait in
// emu::wait_until_at_least: a grid barrier works.
// Shared memory is each block's own, as on a GPU: the emulator's build compiles a copy of every source
// (src/native/emu-source.ts) in which `__shared__ T name[dims];` reads `auto& name = emu::block_shared<T[dims]>(…)`
// and `extern __shared__ T name[];` reads `T* const name = emu::dynamic_shared<T>()` (the launch's dynamic
// bytes), one declaration a line; any other __shared__ fails the build. Every resident block has its own area, so a
// block switch copies nothing. A launch's shared memory starts poisoned (0xff bytes: NaN, -1), as a GPU's is not
// zeroed; blocks run one after another share one area, so a block finds what the block before it left, as a block
// may on a GPU.
// Atomics are plain read-modify-writes and __threadfence() is a no-op: fibers never preempt each other, so
// nothing runs between an atomic's read and its write, and every write is seen by whatever runs after it.
// A launch whose block is not a valid shape, or whose threads can no longer make progress (a barrier some
// threads never reach, a wait nobody can end), fails with cudaErrorInvalidConfiguration /
// cudaErrorLaunchFailure instead of hanging; a cooperative launch with more than 1024 threads fails with
// cudaErrorCooperativeLaunchTooLarge.
// Single host thread: launches from two host threads at once are not supported.
//
// Runtime (cuda/emu/emu_runtime.cpp): the subset of the CUDA runtime API cuda/runtime.cu uses: malloc-backed
// memory, synchronous copies, streams as handles, events holding host timestamps, stream capture recording
// launches into a graph that cudaGraphLaunch replays, and an emulated device ("CPU emulation of CUDA").
#pragma once
#ifdef __CUDACC__
#error "cuda_emu.h is for g++ builds of the .cu sources only"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <bit>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- keywords -------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __launch_bounds__(...)

// ---- vector and index types -------------------------------------------------------------------------------
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace emu {
// The running fiber's coordinates, set by the scheduler before it switches to a fiber.
extern uint3 g_thread_idx;
extern uint3 g_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- shared memory, each block its own (the build's copies call these: the header comment) ----------------
// The running block's static and dynamic shared memory, and the launch's number: a variable's place is assigned
// at its first use in each launch, so a launch's variables lie together, as its kernel's on a GPU.
extern unsigned char* g_static_shared;
extern unsigned char* g_dynamic_shared;
extern uint64_t g_launch_number;
constexpr size_t kStaticSharedBytes = 48 * 1024;  // a GPU block's static shared memory at most
// The offset of `bytes` aligned to `align` in the launch's static shared memory, there poisoned in every block's.
// Past kStaticSharedBytes the launch fails (cudaErrorLaunchFailure) and the offset is 0.
size_t place_shared(size_t bytes, size_t align);

struct SharedPlace {
  uint64_t launch = 0;  // the launch that placed it (0: none yet)
  size_t offset = 0;
};
// Site: a lambda's closure type, one per declaration and per instantiation of the function around it.
template <typename T, typename Site> T& block_shared(Site) {
  static_assert(std::is_trivially_default_constructible<T>::value && std::is_trivially_destructible<T>::value,
                "shared memory is never constructed or destroyed: its variables have no initialiser");
  static SharedPlace place;
  if (place.launch != g_launch_number) place = {g_launch_number, place_shared(sizeof(T), alignof(T))};
  return *reinterpret_cast<T*>(g_static_shared + place.offset);
}
template <typename T> T* dynamic_shared() { return reinterpret_cast<T*>(g_dynamic_shared); }

void block_barrier();
// Parks the calling thread until *counter >= target (returns at once if it already is): the wait of a grid
// barrier, whose blocks each atomicAdd the counter when they arrive. The wait ends when the caller's block is
// resumed and the condition holds, made true by another block of a cooperative launch or by another thread of
// the caller's block; when nothing can make it true the launch fails with cudaErrorLaunchFailure. In a normal
// launch no other block runs while a block waits, so only the caller's own block can end the wait.
void wait_until_at_least(const unsigned* counter, unsigned target);
// Warp collective: every lane in `mask` deposits `value` and reads the value deposited by lane `src_lane`
// (its own value when src_lane < 0 or src_lane is not a participant).
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane);
inline unsigned lane_id() {
  unsigned linear = g_thread_idx.x + g_block_dim.x * (g_thread_idx.y + g_block_dim.y * g_thread_idx.z);
  return linear % kWarpSize;
}

template <typename T> T shuffle(unsigned mask, T var, int src_lane) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "warp shuffle of a value wider than 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &var, sizeof(T));
  bits = warp_exchange(mask, bits, src_lane);
  T out;
  memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace emu

#define threadIdx (::emu::g_thread_idx)
#define blockIdx (::emu::g_block_idx)
#define blockDim (::emu::g_block_dim)
#define gridDim (::emu::g_grid_dim)
#define warpSize 32

// ---- synchronisation and warp collectives ------------------------------------------------------------------
inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = emu::kFullMask) { emu::warp_exchange(mask, 0, -1); }
inline void __threadfence() {}
inline void __threadfence_block() {}

// width: sub-warp segment size (a power of two <= 32), as in CUDA.
template <typename T> T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  int lane = (int)emu::lane_id();
  return emu::shuffle(mask, var, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  int lane = (int)emu::lane_id();
  int src = lane ^ lane_mask;
  bool in_segment = (src & ~(width - 1)) == (lane & ~(width - 1));
  return emu::shuffle(mask, var, in_segment ? src : -1);
}
template <typename T> T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  int lane = (int)emu::lane_id();
  bool in_segment = (lane & (width - 1)) + (int)delta < width;
  return emu::shuffle(mask, var, in_segment ? lane + (int)delta : -1);
}
template <typename T> T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  int lane = (int)emu::lane_id();
  bool in_segment = (lane & (width - 1)) >= (int)delta;
  return emu::shuffle(mask, var, in_segment ? lane - (int)delta : -1);
}

// ---- atomics (fibers never preempt, so plain read-modify-write is exact) -----------------------------------
template <typename T> T atomicAdd(T* address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <typename T> T atomicExch(T* address, T value) {
  T old = *address;
  *address = value;
  return old;
}
template <typename T> T atomicMax(T* address, T value) {
  T old = *address;
  if (value > old) *address = value;
  return old;
}
inline unsigned atomicInc(unsigned* address, unsigned limit) {
  unsigned old = *address;
  *address = old >= limit ? 0 : old + 1;
  return old;
}

// ---- libcu++'s atomic_ref (<cuda/atomic>), as cuda/device_counter.h uses it: plain reads and writes, exact for the
// same reason; the memory orders and scopes are accepted and have nothing to order here -----------------------------
namespace cuda {
enum thread_scope { thread_scope_system, thread_scope_device, thread_scope_block, thread_scope_thread };
namespace std {
using ::std::memory_order;
using ::std::memory_order_acq_rel;
using ::std::memory_order_acquire;
using ::std::memory_order_relaxed;
using ::std::memory_order_release;
using ::std::memory_order_seq_cst;
}  // namespace std
template <typename T, thread_scope> class atomic_ref {
 public:
  explicit atomic_ref(T& value) : value_(value) {}
  T load(::std::memory_order) const { return value_; }
  void store(T v, ::std::memory_order) const { value_ = v; }
  T fetch_add(T v, ::std::memory_order) const { return atomicAdd(&value_, v); }

 private:
  T& value_;
};
}  // namespace cuda

// ---- clocks and sleeps -------------------------------------------------------------------------------------------
// clock64(): a monotonic count (nanoseconds here; SM cycles on a GPU), so spin loops on it end. __nanosleep: a fiber
// never sleeps; a wait that needs another block to move goes through emu::wait_until_at_least.
long long clock64();
inline void __nanosleep(unsigned) {}

// ---- loads and math intrinsics ------------------------------------------------------------------------------
template <typename T> T __ldg(const T* p) { return *p; }
template <typename T> T __ldcg(const T* p) { return *p; }
template <typename T> void __stcg(T* p, T v) { *p = v; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }

// ---- 16-bit storage types (cuda_bf16.h, cuda_fp16.h): the bits, and conversions rounding as the GPU does -----
// float -> bf16/f16: round to nearest even (cvt.rn); overflow gives +-Inf, f16 results below 2^-14 are subnormal;
// NaN becomes the canonical NaN 0x7fff. bf16/f16 -> float: exact.
struct __nv_bfloat16 {
  unsigned short __x;
};
struct __half {
  unsigned short __x;
};
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return {bits}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }

inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.__x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {0x7fff};
  return {(unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

inline float __half2float(__half h) {
  const unsigned sign = (unsigned)(h.__x & 0x8000u) << 16, exponent = (h.__x >> 10) & 0x1fu, mantissa = h.__x & 0x3ffu;
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float subnormal = (float)mantissa * 5.9604644775390625e-8f;  // mantissa x 2^-24, exact
  return sign ? -subnormal : subnormal;
}
inline __half __float2half_rn(float f) {
  const unsigned x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {0x7fff};
  if (magnitude >= 0x477ff000u) return {(unsigned short)(sign | 0x7c00u)};  // >= 65520 rounds to Inf
  if (magnitude >= 0x38800000u) {  // a normal half: rebias the exponent, round the 13 dropped mantissa bits
    const unsigned rebiased = magnitude - (112u << 23);
    return {(unsigned short)(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13))};
  }
  if (magnitude < 0x33000000u) return {(unsigned short)sign};  // below 2^-25 (2^-25 itself ties to 0)
  const unsigned exponent = magnitude >> 23, mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const unsigned shift = 126u - exponent;  // subnormal units of 2^-24: mantissa x 2^(exponent - 126)
  const unsigned kept = mantissa >> shift, dropped = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const unsigned rounded = kept + (dropped > half || (dropped == half && (kept & 1u)) ? 1u : 0u);
  return {(unsigned short)(sign | rounded)};
}

// ---- runtime API subset -----------------------------------------------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorCooperativeLaunchTooLarge = 720,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

typedef struct EmuStream* cudaStream_t;
typedef struct EmuEvent* cudaEvent_t;
typedef struct EmuGraph* cudaGraph_t;
typedef struct EmuGraph* cudaGraphExec_t;
typedef struct EmuGraphNode* cudaGraphNode_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
enum cudaGraphNodeType { cudaGraphNodeTypeKernel = 0x00, cudaGraphNodeTypeMemcpy = 0x01 };
enum cudaDeviceAttr {
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T> cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

// ---- kernel launch (the emulator's side of LAUNCH in cuda/launch.h) ----------------------------------------
namespace emu {
using KernelBody = std::function<void()>;  // one thread's run of the kernel
// Runs the launch now, or records it when `stream` is capturing (a replay runs it the same way, cooperative
// or not), each block with `dynamic_shared_bytes` of dynamic shared memory; a bad configuration or a stuck block
// becomes the error cudaGetLastError() returns.
void submit_launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream, KernelBody body,
                   bool cooperative);
// The most blocks of `block_threads` threads a cooperative launch may have (0 for an invalid block size):
// the emulator's stand-in for the occupancy API a GPU build sizes its persistent grid with.
int cooperative_max_blocks(int block_threads);

template <typename... Params, typename... Args> KernelBody bind_kernel(void (*kernel)(Params...), Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launched with the wrong number of arguments");
  std::tuple<Params...> bound(static_cast<Params>(std::forward<Args>(args))...);
  return [kernel, bound] { std::apply(kernel, bound); };
}
}  // namespace emu

template <typename... Params, typename... Args>
void emu_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                Args&&... args) {
  emu::submit_launch(grid, block, dynamic_smem, stream, emu::bind_kernel(kernel, std::forward<Args>(args)...), false);
}
// As emu_launch, with every block resident at once (cudaLaunchCooperativeKernel): blocks may wait for each
// other in emu::wait_until_at_least. More than 1024 threads in all fail with cudaErrorCooperativeLaunchTooLarge.
template <typename... Params, typename... Args>
void emu_launch_cooperative(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                            Args&&... args) {
  emu::submit_launch(grid, block, dynamic_smem, stream, emu::bind_kernel(kernel, std::forward<Args>(args)...), true);
}
