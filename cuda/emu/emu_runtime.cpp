// The emulator's runtime API: memory, streams, events, stream capture and graphs, errors and an
// emulated device (see cuda_emu.h). Everything is synchronous: work runs when it is submitted, except
// on a capturing stream, where kernel launches are recorded into the graph being captured.
#include "cuda_emu.h"

#include <stdlib.h>

#include <chrono>
#include <map>
#include <vector>

struct EmuGraphNode {
  cudaGraphNodeType type;
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  emu::KernelBody body;
  bool cooperative;
};
struct EmuGraph {
  std::vector<EmuGraphNode> nodes;
};
struct EmuStream {
  EmuGraph* capture = nullptr;  // non-null while capturing
};
struct EmuEvent {
  double ms = 0;
  bool recorded = false;
};

namespace emu {
void run_launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const KernelBody& body,
                bool cooperative);  // emu_exec.cpp

namespace {
// The emulated device: launch shapes computed from these match an H100/H200, so the emulator runs the
// same grids the GPU would.
constexpr int kDeviceCount = 1;
constexpr int kSmCount = 132;
constexpr int kCcMajor = 9;
constexpr int kCcMinor = 0;
constexpr int kClockKhz = 1980000;
constexpr int kMemClockKhz = 2619000;
constexpr int kBusWidthBits = 5120;
constexpr int kL2Bytes = 50 * 1024 * 1024;
constexpr int kSmemOptinBytes = 227 * 1024;
constexpr int kCudaVersion = 13000;
constexpr size_t kTotalBytes = (size_t)16 << 30;  // the emulated device's memory: an accounting limit only
constexpr size_t kAllocAlignment = 256;           // as cudaMalloc

cudaError_t g_sticky = cudaSuccess;
size_t g_allocated = 0;
std::map<void*, size_t> g_allocations;
EmuStream g_legacy_stream;

EmuStream* resolve(cudaStream_t stream) { return stream ? stream : &g_legacy_stream; }
bool capturing(cudaStream_t stream) { return resolve(stream)->capture != nullptr; }
double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void set_launch_error(cudaError_t error) {
  if (g_sticky == cudaSuccess) g_sticky = error;
}

void submit_launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream, KernelBody body,
                   bool cooperative) {
  EmuStream* s = resolve(stream);
  if (s->capture) {
    s->capture->nodes.push_back(
        {cudaGraphNodeTypeKernel, grid, block, dynamic_shared_bytes, std::move(body), cooperative});
    return;
  }
  run_launch(grid, block, dynamic_shared_bytes, body, cooperative);
}
}  // namespace emu

using emu::g_sticky;

long long clock64() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

cudaError_t cudaGetLastError() {
  cudaError_t e = g_sticky;
  g_sticky = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_sticky; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (emulator: a barrier or warp collective some threads never reached, or a wait "
             "nobody could end)";
    case cudaErrorCooperativeLaunchTooLarge:
      return "too many blocks in cooperative launch (emulator: more threads in all than one block may have)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return cudaGetErrorName(error);
  }
}

// ---- device ---------------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  *count = emu::kDeviceCount;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < emu::kDeviceCount ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= emu::kDeviceCount) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  strncpy(prop->name, "CPU emulation of CUDA", sizeof prop->name - 1);
  prop->totalGlobalMem = emu::kTotalBytes;
  prop->major = emu::kCcMajor;
  prop->minor = emu::kCcMinor;
  prop->multiProcessorCount = emu::kSmCount;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= emu::kDeviceCount) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrClockRate: *value = emu::kClockKhz; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = emu::kSmCount; return cudaSuccess;
    case cudaDevAttrMemoryClockRate: *value = emu::kMemClockKhz; return cudaSuccess;
    case cudaDevAttrGlobalMemoryBusWidth: *value = emu::kBusWidthBits; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = emu::kL2Bytes; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = emu::kCcMajor; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = emu::kCcMinor; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = emu::kSmemOptinBytes; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = emu::kCudaVersion;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = emu::kCudaVersion;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = emu::kTotalBytes;
  *free_bytes = emu::kTotalBytes - emu::g_allocated;
  return cudaSuccess;
}

// ---- memory ---------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes > emu::kTotalBytes - emu::g_allocated) return cudaErrorMemoryAllocation;
  size_t rounded = (bytes + emu::kAllocAlignment - 1) / emu::kAllocAlignment * emu::kAllocAlignment;
  void* p = aligned_alloc(emu::kAllocAlignment, rounded ? rounded : emu::kAllocAlignment);
  if (!p) return cudaErrorMemoryAllocation;
  emu::g_allocations[p] = bytes;
  emu::g_allocated += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto it = emu::g_allocations.find(ptr);
  if (it == emu::g_allocations.end()) return cudaErrorInvalidDevicePointer;
  emu::g_allocated -= it->second;
  emu::g_allocations.erase(it);
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (emu::capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (emu::capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  memset(dst, value, bytes);
  return cudaSuccess;
}

// ---- streams and capture ---------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  delete stream->capture;
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return emu::capturing(stream) ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (!stream) return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot be captured
  if (stream->capture) return cudaErrorIllegalState;
  stream->capture = new EmuGraph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!stream || !stream->capture) return cudaErrorIllegalState;
  *graph = stream->capture;
  stream->capture = nullptr;
  return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (emu::capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  event->ms = emu::now_ms();  // all earlier work has already run
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return event ? cudaSuccess : cudaErrorInvalidResourceHandle; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = (float)(end->ms - start->ms);
  return cudaSuccess;
}

// ---- graphs: an executable graph is a copy of the captured node list ---------------------------------------
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return cudaErrorInvalidValue;
  *exec = new EmuGraph(*graph);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return cudaErrorInvalidResourceHandle;
  for (const EmuGraphNode& node : exec->nodes)
    emu::submit_launch(node.grid, node.block, node.dynamic_shared_bytes, stream, node.body, node.cooperative);
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return cudaErrorInvalidValue;
  if (nodes) {
    size_t n = *count < graph->nodes.size() ? *count : graph->nodes.size();
    for (size_t i = 0; i < n; i++) nodes[i] = &graph->nodes[i];
  }
  *count = graph->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node) return cudaErrorInvalidValue;
  *type = node->type;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
