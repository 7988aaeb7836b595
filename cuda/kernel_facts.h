// The kernels' geometry and dependent chains, as the kernel model and the SASS checks read them
// (src/native/kernel-facts.ts): filled by cu_kernel_facts (cuda/kernel_facts.cu) from the constexprs the kernels
// themselves use, and exported by libgpt2_cuda.so and libgpt2_emu.so. int32 fields, naturally aligned; their
// offsets are CU_KERNEL_FACTS (test/abi-layout.test.ts checks them against offsetof).
#pragma once
#include <stdint.h>

#include "op_table.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CU_FACTS_ONE_OP(name, function, code, type) +1
enum {
  CU_FACTS_BUCKETS = 4,                          // the row counts batch_bucket gives (cuda/launch.h)
  CU_FACTS_OPS = 1 DECODE_OPS(CU_FACTS_ONE_OP),  // opcodes 1, 2, ... (0 is none)
};
#undef CU_FACTS_ONE_OP

typedef struct CuKernelFacts {
  int32_t access_bytes;  // one vector access (kAccessBytes): a "16-byte load"
  int32_t warp_size;
  int32_t batch_buckets[CU_FACTS_BUCKETS];  // rows a batched kernel is instantiated to accumulate, ascending
  // the decode matvec (cuda/linear.h): op_linear's decode kernel and the fused decode matvecs
  int32_t matvec_threads;
  int32_t matvec_loads;           // weight loads in flight per thread
  int32_t matvec_rows_per_split;  // rows of C per block
  int32_t matvec_tile_bytes;      // bytes of one weight row in a block's column tile (16-byte variant)
  int32_t matvec_min_blocks_per_sm[DTYPE_COUNT]
                                  [CU_FACTS_BUCKETS];  // __launch_bounds__ by the weights' DTYPE and bucket
  int32_t matvec_head_norm_l2_trips;  // rms_qkv_rope with q/k norms: the further round trips of a head's last tile
  // the LM head and argmax (cuda/lm_head.h)
  int32_t lm_head_threads;
  int32_t lm_head_rows_per_warp;     // vocabulary rows a warp works on at once
  int32_t lm_head_chunks_per_batch;  // 16-byte chunks of each of those rows per lane and batch
  int32_t lm_head_rows_per_block;    // vocabulary rows a block's warps take first
  int32_t lm_head_min_blocks_per_sm[CU_FACTS_BUCKETS];
  int32_t argmax_loads;  // 16-byte loads in flight per thread
  // decode attention (cuda/attention.h)
  int32_t attn_threads;
  int32_t attn_keys_per_chunk;
  int32_t attn_lanes_per_key;       // threads sharing one key's score
  int32_t attn_max_head_size;       // head sizes up to which a thread's loads are declared (the fast path)
  int32_t attn_wide_head_size;      // the wide kernel's: the widest head op_attention takes
  int32_t attn_blocks_per_sm;       // blocks an SM holds, which the splits fill: the fast kernel's
  int32_t attn_wide_blocks_per_sm;  // and the wide kernel's
  int32_t attn_merge_batch;         // splits whose partials the merge loads at once (one L2 round trip each)
  int32_t attn_max_splits;          // most splits per (row, K/V head's pass)
  // the persistent step kernel (cuda/persistent.cu)
  int32_t persistent_threads;
  int32_t persistent_min_blocks_per_sm[DTYPE_COUNT]
                                      [CU_FACTS_BUCKETS];  // by the weights' (and cache's) DTYPE and bucket
  int32_t persistent_later_round_l2_trips;  // dependent L2 round trips of each round of a task after its first
  // dependent L2 round trips of each op's kernel besides its data stream, by opcode: reading the position before the
  // rows it selects, a layer norm's row, the merge across blocks
  int32_t chain_l2_trips[CU_FACTS_OPS];
} CuKernelFacts;

// Fills *out; 0, or 1 where batch_bucket gives more row counts than the struct holds.
int cu_kernel_facts(CuKernelFacts* out);

#ifdef __cplusplus
}
#endif
