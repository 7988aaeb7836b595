// The counters the blocks of one launch meet on (a grid barrier's arrivals, a last-block merge's count). One thread
// per block touches a counter, at device scope, with release and acquire orders: a block's threads meet at
// __syncthreads first and that thread's release carries their writes along (PTX memory model: causality order is
// transitive through the CTA barrier); a reader acquires, then its block's threads meet. This is CUTLASS's
// GenericBarrier (cutlass/barrier.h). No sequentially consistent fence: __threadfence() is MEMBAR.SC.GPU, which
// the SASS checks refuse on these paths (src/verify/sass-checks.ts).
#pragma once
#ifdef __CUDACC__
#include <cuda/atomic>
#endif

using DeviceCounter = cuda::atomic_ref<unsigned, cuda::thread_scope_device>;
