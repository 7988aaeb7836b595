// CUPTI activity tracer (see trace.h): buffer callbacks in C, records parsed into vectors under a mutex.
#include "trace.h"

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;  // per CUPTI buffer
constexpr size_t kBufferAlign = 8;         // CUPTI requires 8-byte aligned buffers

std::mutex g_mu;  // guards everything below: the completion callback runs on CUPTI's thread
// never destroyed: CUPTI may still deliver a buffer while the process exits
std::vector<TraceKernel>& g_kernels = *new std::vector<TraceKernel>;
std::vector<TraceApi>& g_api = *new std::vector<TraceApi>;
uint64_t g_dropped = 0;
bool g_registered = false;
int g_enabled = 0;  // bit 0 kernels, plus TRACE_RUNTIME_API / TRACE_DRIVER_API shifted left by one

void copy_name(char* dst, size_t cap, const char* src) {
  if (!src) src = "";
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

void parse_kernel(const CUpti_ActivityKernel10* k) {
  if (k->start == 0 || k->end == 0) {  // CUPTI had no device memory for this kernel's timestamps
    g_dropped++;
    return;
  }
  TraceKernel r{};
  r.start_ns = k->start;
  r.end_ns = k->end;
  r.graph_node_id = k->graphNodeId;
  r.correlation_id = k->correlationId;
  r.graph_id = k->graphId;
  r.stream_id = k->streamId;
  r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
  r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
  r.registers = k->registersPerThread;
  r.static_shared = k->staticSharedMemory;
  r.dynamic_shared = k->dynamicSharedMemory;
  int status = 0;
  char* demangled = k->name ? abi::__cxa_demangle(k->name, nullptr, nullptr, &status) : nullptr;
  copy_name(r.name, sizeof r.name,
            status == 0 && demangled ? demangled : k->name);  // extern "C" names stay as they are
  free(demangled);
  g_kernels.push_back(r);
}

void parse_api(const CUpti_ActivityAPI* a) {
  TraceApi r{};
  r.start_ns = a->start;
  r.end_ns = a->end;
  r.correlation_id = a->correlationId;
  r.cbid = a->cbid;
  r.domain = a->kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
  r.return_value = a->returnValue;
  r.process_id = a->processId;
  r.thread_id = a->threadId;
  const char* name = nullptr;
  if (cuptiGetCallbackName(static_cast<CUpti_CallbackDomain>(r.domain), r.cbid, &name) != CUPTI_SUCCESS) name = "?";
  copy_name(r.name, sizeof r.name, name);
  // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" (Nsight's spelling); names without a _v<digits> suffix stay
  if (char* v = strrchr(r.name, '_'); v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' && v != r.name) *v = '\0';
  g_api.push_back(r);
}

// caller holds g_mu
void parse_record(const CUpti_Activity* rec) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      parse_kernel(reinterpret_cast<const CUpti_ActivityKernel10*>(rec));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: parse_api(reinterpret_cast<const CUpti_ActivityAPI*>(rec)); break;
    default: break;
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(kBufferAlign, kBufferBytes));  // NULL: CUPTI drops and counts
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* rec = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) parse_record(rec);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  free(buffer);
}

int disable_enabled() {
  int first_error = CUPTI_SUCCESS;
  const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                      CUPTI_ACTIVITY_KIND_DRIVER};
  for (int i = 0; i < 3; i++) {
    if (!(g_enabled & (1 << i))) continue;
    CUptiResult r = cuptiActivityDisable(kinds[i]);
    if (r != CUPTI_SUCCESS && first_error == CUPTI_SUCCESS) first_error = r;
  }
  g_enabled = 0;
  return first_error;
}

template <typename Record> int record_count(const std::vector<Record>& records) {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<int>(records.size());
}

// Copies up to max records (oldest first) into out; returns how many.
template <typename Record> int read_records(const std::vector<Record>& records, Record* out, int max) {
  std::lock_guard<std::mutex> lock(g_mu);
  const size_t n = max > 0 ? std::min(records.size(), static_cast<size_t>(max)) : 0;
  if (n) memcpy(out, records.data(), n * sizeof(Record));
  return static_cast<int>(n);
}

}  // namespace

extern "C" {

int trace_start(int flags) {
  if (!g_registered) {
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) return r;
    g_registered = true;
  }
  const struct {
    bool want;
    CUpti_ActivityKind kind;
  } wanted[] = {{true, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
                {(flags & TRACE_RUNTIME_API) != 0, CUPTI_ACTIVITY_KIND_RUNTIME},
                {(flags & TRACE_DRIVER_API) != 0, CUPTI_ACTIVITY_KIND_DRIVER}};
  for (int i = 0; i < 3; i++) {
    if (!wanted[i].want) continue;
    CUptiResult r = cuptiActivityEnable(wanted[i].kind);
    if (r != CUPTI_SUCCESS) {
      disable_enabled();  // all or nothing
      return r;
    }
    g_enabled |= 1 << i;
  }
  return CUPTI_SUCCESS;
}

int trace_flush(void) {
  if (!g_enabled) return CUPTI_SUCCESS;
  return cuptiActivityFlushAll(0);  // not under g_mu: the completion callback may run on this thread
}

int trace_stop(void) {
  if (!g_enabled) return CUPTI_SUCCESS;
  CUptiResult flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  int disabled = disable_enabled();
  return flushed != CUPTI_SUCCESS ? flushed : disabled;
}

int trace_kernel_count(void) { return record_count(g_kernels); }
int trace_read_kernels(TraceKernel* out, int max) { return read_records(g_kernels, out, max); }
int trace_api_count(void) { return record_count(g_api); }
int trace_read_api(TraceApi* out, int max) { return read_records(g_api, out, max); }

void trace_clear(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_kernels.clear();
  g_api.clear();
  g_dropped = 0;
}

uint64_t trace_timestamp(void) {
  uint64_t t = 0;
  return cuptiGetTimestamp(&t) == CUPTI_SUCCESS ? t : 0;
}

int trace_dropped(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_dropped > INT32_MAX ? INT32_MAX : static_cast<int>(g_dropped);
}

int trace_driver_available(void) {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

const char* trace_error_string(int code) {
  const char* s = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(code), &s) != CUPTI_SUCCESS || !s) return "unknown CUPTI error";
  return s;
}

void trace_record_sizes(int32_t* sizes) {
  sizes[0] = sizeof(TraceKernel);
  sizes[1] = sizeof(TraceApi);
}

void trace_selftest_inject(int n, uint64_t base_ns) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < n; i++) {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = base_ns + 1000ull * i;
    k.end = k.start + 500 + i;
    k.correlationId = 100 + i;
    k.graphId = i % 2 ? i : 0;
    k.graphNodeId = i % 2 ? 7ull * i + 1 : 0;
    k.streamId = 13 + i;
    k.gridX = 1 + i, k.gridY = 2, k.gridZ = 3;
    k.blockX = 32 * i + 32, k.blockY = 4, k.blockZ = 1;
    k.registersPerThread = 16 + i;
    k.staticSharedMemory = 48 * i;
    k.dynamicSharedMemory = 1024 + i;
    k.name = i % 2 ? "linear_matvec_kernel" : "_Z16layernorm_kernelPfPKfi";
    parse_record(reinterpret_cast<const CUpti_Activity*>(&k));

    CUpti_ActivityAPI a{};
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = i % 2 ? CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a.start = base_ns + 1000ull * i - 200;
    a.end = a.start + 150;
    a.correlationId = 100 + i;
    a.returnValue = i;
    a.processId = 4242;
    a.threadId = 77 + i;
    parse_record(reinterpret_cast<const CUpti_Activity*>(&a));
  }
}

}  // extern "C"
