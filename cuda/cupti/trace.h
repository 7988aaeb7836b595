// CUPTI activity tracer: kernel and launch-API records collected in native memory, read after a flush.
//
// CUPTI calls its buffer callbacks on its own thread, so they stay in C (bun:ffi JSCallbacks from a foreign
// thread are unreliable): completed buffers are parsed into the compact records below under a mutex, and
// TypeScript copies them out with trace_read_*. One tracer per process (CUPTI's activity state is global).
//
// Times are nanoseconds on CUPTI's clock (trace_timestamp reads it). Kernel records come from
// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (CUpti_ActivityKernel10 in CUPTI 13), which does not serialise kernels.
// Every int-returning function returns a CUptiResult (0 = CUPTI_SUCCESS) unless it says otherwise.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TRACE_RUNTIME_API = 1, TRACE_DRIVER_API = 2 };  // trace_start flags; kernels are always traced

// One kernel execution, packed by construction (no padding). TypeScript reads it at the offsets of TRACE_KERNEL
// (src/native/cupti.ts; test/abi-layout.test.ts checks them against offsetof).
typedef struct TraceKernel {
  uint64_t start_ns;  // CUPTI clock
  uint64_t end_ns;
  uint64_t graph_node_id;   // 0 unless launched by a CUDA graph
  uint32_t correlation_id;  // matches the launching API record's correlation_id
  uint32_t graph_id;        // 0 unless launched by a CUDA graph
  uint32_t stream_id;
  int32_t grid[3];         // x, y, z
  int32_t block[3];        // x, y, z
  int32_t registers;       // per thread
  int32_t static_shared;   // bytes per block
  int32_t dynamic_shared;  // bytes per block
  char name[128];          // demangled, NUL-terminated, cut at 127 bytes
} TraceKernel;

// One runtime or driver API call, packed by construction; read at the offsets of TRACE_API.
typedef struct TraceApi {
  uint64_t start_ns;  // CUPTI clock
  uint64_t end_ns;
  uint32_t correlation_id;
  uint32_t cbid;          // CUPTI_RUNTIME_TRACE_CBID_* or CUPTI_DRIVER_TRACE_CBID_*
  uint32_t domain;        // CUpti_CallbackDomain: 1 = driver, 2 = runtime
  uint32_t return_value;  // cudaError_t / CUresult of the call
  uint32_t process_id;
  uint32_t thread_id;
  char name[64];  // e.g. "cudaLaunchKernel" (version suffix "_v7000" removed), NUL-terminated
} TraceApi;

// Registers the buffer callbacks (once) and enables kernel records, plus API records per flags.
// Fails (nonzero, never crashes) where there is no driver or device.
int trace_start(int flags);
int trace_flush(void);  // delivers completed buffers (0 if not started); synchronise the device first
int trace_stop(void);   // forced flush, then disables every kind trace_start enabled; 0 if not started

int trace_kernel_count(void);                       // records held
int trace_read_kernels(TraceKernel* out, int max);  // copies the first min(max, held) records; returns how many
int trace_api_count(void);
int trace_read_api(TraceApi* out, int max);
void trace_clear(void);  // forgets held records and the dropped count

uint64_t trace_timestamp(void);  // now on CUPTI's clock in ns (0 if CUPTI cannot read it)
// Records lost since the last trace_clear: CUPTI's dropped count (no buffer space) plus kernel records
// delivered without timestamps.
int trace_dropped(void);
const char* trace_error_string(int code);  // cuptiGetResultString, e.g. "CUPTI_ERROR_NOT_INITIALIZED"
// 1 if the CUDA driver (libcuda.so.1) can be loaded: explains a failed trace_start (CUPTI then says only
// CUPTI_ERROR_UNKNOWN). Returns 1/0, not a CUptiResult.
int trace_driver_available(void);

// sizes[0] = sizeof(TraceKernel), sizes[1] = sizeof(TraceApi): the reader checks them against its own.
void trace_record_sizes(int32_t* sizes);
// Test hook: parses n synthetic CUPTI kernel records and n runtime-API records (i = 0..n-1) through the same
// path as real buffers, so record parsing and the readers' offsets are checked without a GPU:
//   kernel i: start = base_ns + 1000 i, end = start + 500 + i, correlation 100 + i, graph (i, 7 i + 1) when
//   i is odd else (0, 0), stream 13 + i, grid (1 + i, 2, 3), block (32 i + 32, 4, 1), registers 16 + i,
//   shared (48 i, 1024 + i), name "_Z16layernorm_kernelPfPKfi" demangled (i even) or "linear_matvec_kernel";
//   api i: start = base_ns + 1000 i - 200, end = start + 150, correlation 100 + i, runtime cbid
//   cudaLaunchKernel_v7000 (211) when i is even else cudaGraphLaunch_v10000 (311), return value i,
//   process 4242, thread 77 + i.
void trace_selftest_inject(int n, uint64_t base_ns);

#ifdef __cplusplus
}
#endif
