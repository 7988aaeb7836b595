// Memory, synchronisation and errors: the C ABI every backend library exports beside ops.h.
// The CPU library implements it on host memory (cuda/cpu_runtime.cpp); the CUDA library on the
// CUDA runtime (cuda/runtime.cu), which adds devices, streams, events and graphs (cuda/cuda_runtime_api.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// 0 on success, else the backend's error code (cudaError_t for CUDA). Reads and clears the sticky error.
int be_init(int device);
int be_last_error(void);
const char* be_error_name(int code);
const char* be_error_string(int code);

// Zeroing contract: be_alloc returns memory that reads as zero, so callers never clear a fresh buffer
// (the KV cache, activations). NULL on failure (be_last_error says why). The CPU library maps fresh
// anonymous pages: zero, and committed only when first written, so an untouched region costs no resident
// memory; the CUDA library clears what cudaMalloc returns (cudaMemset) before returning it.
void* be_alloc(size_t bytes);
// be_alloc for a buffer written whole before it is read (the weights): the CPU library asks the kernel for huge
// pages (the decode step streams it: 2026-12-06, AMD EPYC VM, op_linear over 1 GiB read 1.05-1.11x faster than
// from 4 KiB pages), which commit 2 MiB at a first write; the CUDA library's is be_alloc.
void* be_alloc_whole(size_t bytes);
int be_free(void* ptr);
int be_upload(void* dst, const void* host_src, size_t bytes);
int be_download(void* host_dst, const void* src, size_t bytes);
// Elements [first, first + count) of a row-major (rows, cols) matrix of `element_bytes`-byte values (a linear
// layer's weight, input-first: rows = C, cols = OC), into the matrix at dst in the library's own layout: as
// given on a GPU (a matvec's threads read its columns, coalesced), out-major (cols, rows) in the CPU library (a
// decode matvec there is one contiguous dot product per output, cuda/linear.cpp).
int be_upload_matrix(void* dst, const void* host_src, uint64_t first, uint64_t count, int rows, int cols,
                     int element_bytes);
int be_copy(void* dst, const void* src, size_t bytes);
int be_fill_u32(void* dst, uint32_t value, size_t count);  // poisoning: count 32-bit words
int be_synchronize(void);
// out[0] = free bytes, out[1] = total bytes: the device's memory, or the host's (MemAvailable, MemTotal) on the CPU
int be_mem_info(uint64_t* out);

#ifdef __cplusplus
}
#endif
