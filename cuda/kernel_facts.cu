// cu_kernel_facts (cuda/kernel_facts.h): the kernels' constexprs as one struct, so that the kernel model and the
// SASS checks (src/native/kernel-facts.ts) read the numbers the kernels are compiled with instead of copies.
#include "kernel_facts.h"

#include "attention.h"
#include "embed.h"
#include "linear.h"
#include "lm_head.h"
#include "persistent.h"
#include "plan.h"

// layernorm.cu, rmsnorm.cu, rope.cu and elementwise.cu keep their kernels' constants in the .cu, out of reach here:
// their chains sit here.
constexpr int kLayernormChainL2Trips = 1;    // the row in, two block reductions, the row out (RMSNorm: one reduction)
constexpr int kElementwiseChainL2Trips = 0;  // gelu, residual, swiglu: loads, arithmetic, stores
constexpr int kRopeChainL2Trips = 1;         // the state, then the head and its table row

// An op's kernel's dependent L2 round trips (a missing case is a -Wswitch error: every op has its chain).
static int chain_l2_trips(OpCode op) {
  switch (op) {
    case OP_EMBED: return kEmbedChainL2Trips;
    case OP_LAYERNORM:
    case OP_RMSNORM: return kLayernormChainL2Trips;
    case OP_ROPE: return kRopeChainL2Trips;
    case OP_LINEAR:
    case OP_LN_QKV:
    case OP_LN_LINEAR_GELU:
    case OP_LINEAR_RESIDUAL:
    case OP_RMS_QKV_ROPE:
    case OP_RMS_GATE_UP: return kMatvecChainL2Trips;
    case OP_KV_APPEND: return kKvAppendChainL2Trips;
    case OP_ATTENTION: return kAttnChainL2Trips;
    case OP_GELU:
    case OP_RESIDUAL:
    case OP_SWIGLU: return kElementwiseChainL2Trips;
    case OP_LM_HEAD: return kLmHeadChainL2Trips;
    case OP_ARGMAX: return kArgmaxChainL2Trips;
    case OP_LN_LM_HEAD_ARGMAX:
    case OP_RMS_LM_HEAD_ARGMAX: return kLnLmHeadArgmaxChainL2Trips;
  }
  return -1;
}

// The matvec instantiation's __launch_bounds__ blocks per SM for weights in `dtype` and `rows` rows.
static int matvec_min_blocks_per_sm(int dtype, int rows) {
  int n = 0;
  with_storage(dtype, [&](auto w) {
    with_batch_bucket(rows, [&](auto r) {
      constexpr int V = kVecOf<decltype(w)>, R = decltype(r)::value;
      static_assert(
          MatvecShape<V, R, kInputAsIs>::kMinBlocksPerSm == MatvecShape<V, R, kInputLayernorm>::kMinBlocksPerSm &&
              MatvecShape<V, R, kInputAsIs>::kMinBlocksPerSm == MatvecShape<V, R, kInputRmsnorm>::kMinBlocksPerSm,
          "every matvec op of an instantiation fits as many blocks");
      n = MatvecShape<V, R, kInputAsIs>::kMinBlocksPerSm;
    });
  });
  return n;
}

extern "C" int cu_kernel_facts(CuKernelFacts* out) {
  CuKernelFacts f = {};
  f.access_bytes = kAccessBytes;
  f.warp_size = kWarpSize;
  int buckets = 0;
  for (int rows = 1; rows <= MAX_BATCH; rows++) {
    if (buckets > 0 && f.batch_buckets[buckets - 1] == batch_bucket(rows)) continue;
    if (buckets == CU_FACTS_BUCKETS) return 1;
    f.batch_buckets[buckets++] = batch_bucket(rows);
  }
  if (buckets != CU_FACTS_BUCKETS) return 1;
  f.matvec_threads = kMatvecThreads;
  f.matvec_loads = kMatvecLoads;
  f.matvec_rows_per_split = kMatvecRowsPerSplit;
  f.matvec_tile_bytes = kMatvecTileGroups * kAccessBytes;
  f.matvec_head_norm_l2_trips = kMatvecHeadNormL2Trips;
  f.lm_head_threads = kLmHeadThreads;
  f.lm_head_rows_per_warp = kLmHeadRowsPerWarp;
  f.lm_head_chunks_per_batch = kLmHeadChunksPerBatch;
  f.lm_head_rows_per_block = kLmHeadRowsPerBlock;
  f.argmax_loads = kArgmaxVecPerThread;
  f.attn_threads = kAttnThreads;
  f.attn_keys_per_chunk = kAttnKeysPerChunk;
  f.attn_lanes_per_key = kAttnLanesPerKey;
  f.attn_max_head_size = kAttnMaxHeadSize;
  f.attn_wide_head_size = kAttnWideHeadSize;
  f.attn_blocks_per_sm = kAttnBlocksPerSm;
  f.attn_wide_blocks_per_sm = kAttnWideBlocksPerSm;
  f.attn_merge_batch = kAttnMergeBatch;
  f.attn_max_splits = kAttnMaxSplits;
  f.persistent_threads = kMatvecThreads;  // kStepThreads: persistent.cu asserts every body's blocks are that size
  f.persistent_later_round_l2_trips = kStepLaterRoundL2Trips;
  for (int b = 0; b < CU_FACTS_BUCKETS; b++) {
    const int rows = f.batch_buckets[b];
    f.lm_head_min_blocks_per_sm[b] = lm_head_min_blocks_per_sm(rows);
    for (int dtype = 0; dtype < DTYPE_COUNT; dtype++) {
      f.matvec_min_blocks_per_sm[dtype][b] = matvec_min_blocks_per_sm(dtype, rows);
      f.persistent_min_blocks_per_sm[dtype][b] = persistent_min_blocks_per_sm(dtype, rows);
    }
  }
  for (int op = 1; op < CU_FACTS_OPS; op++) f.chain_l2_trips[op] = chain_l2_trips(static_cast<OpCode>(op));
  *out = f;
  return 0;
}
