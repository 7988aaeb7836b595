// The kernels' facts as the built library exports them (cu_kernel_facts, cuda/kernel_facts.h): their geometry and
// dependent chains, filled from the constexprs the kernels are compiled with, for the kernel model and the SASS
// checks to read instead of copies.
import { dlopen, FFIType } from "bun:ffi";

import { DTYPE_BYTES, DTYPE_NAMES, DTYPES, OP_FAMILIES, OPS, type DtypeName, type OpFamily } from "../ops.ts";
import type { StructLayout } from "./struct-layout.ts";

/** Row counts batch_bucket gives (CU_FACTS_BUCKETS), opcodes 0.. (CU_FACTS_OPS). */
const BUCKETS = 4;
const OPCODES = Math.max(...OP_FAMILIES.map((f) => OPS[f].code)) + 1;

/** CuKernelFacts's fields in order, int32 each, with their element counts. */
const FIELDS = [
  ["access_bytes", 1],
  ["warp_size", 1],
  ["batch_buckets", BUCKETS],
  ["matvec_threads", 1],
  ["matvec_loads", 1],
  ["matvec_rows_per_split", 1],
  ["matvec_tile_bytes", 1],
  ["matvec_min_blocks_per_sm", DTYPE_NAMES.length * BUCKETS],
  ["matvec_head_norm_l2_trips", 1],
  ["lm_head_threads", 1],
  ["lm_head_rows_per_warp", 1],
  ["lm_head_chunks_per_batch", 1],
  ["lm_head_rows_per_block", 1],
  ["lm_head_min_blocks_per_sm", BUCKETS],
  ["argmax_loads", 1],
  ["attn_threads", 1],
  ["attn_keys_per_chunk", 1],
  ["attn_lanes_per_key", 1],
  ["attn_max_head_size", 1],
  ["attn_wide_head_size", 1],
  ["attn_blocks_per_sm", 1],
  ["attn_wide_blocks_per_sm", 1],
  ["attn_merge_batch", 1],
  ["attn_max_splits", 1],
  ["persistent_threads", 1],
  ["persistent_min_blocks_per_sm", DTYPE_NAMES.length * BUCKETS],
  ["persistent_later_round_l2_trips", 1],
  ["chain_l2_trips", OPCODES],
] as const;
type Field = (typeof FIELDS)[number][0];

const INT32 = 4;
const offsets = FIELDS.reduce<{ at: number; fields: Record<string, number> }>(
  ({ at, fields }, [name, count]) => ({ at: at + count * INT32, fields: { ...fields, [name]: at } }),
  { at: 0, fields: {} },
);

/** cuda/kernel_facts.h CuKernelFacts: its size and the byte offsets of its fields. */
export const CU_KERNEL_FACTS: StructLayout<Field> = {
  struct: "CuKernelFacts",
  header: "kernel_facts.h",
  bytes: offsets.at,
  fields: offsets.fields as Record<Field, number>,
};

/** The kernels' facts (cuda/kernel_facts.h says where each comes from). */
export interface KernelFacts {
  /** bytes of one vector access: the 16-byte load the hot kernels are built around */
  accessBytes: number;
  warpSize: number;
  /** rows a batched kernel is instantiated to accumulate, ascending: a launch takes the fewest that hold its rows */
  batchBuckets: readonly number[];
  /** the decode matvec (cuda/linear.h); minBlocksPerSm by the weights' storage type, per batch bucket */
  matvec: {
    threads: number;
    loads: number;
    rowsPerSplit: number;
    tileBytes: number;
    minBlocksPerSm: Readonly<Record<DtypeName, readonly number[]>>;
    /** rms_qkv_rope with q/k norms: the dependent L2 round trips a head's last tile adds to the merge */
    headNormL2Trips: number;
  };
  /** the LM head (cuda/lm_head.h); minBlocksPerSm per batch bucket */
  lmHead: {
    threads: number;
    rowsPerWarp: number;
    chunksPerBatch: number;
    rowsPerBlock: number;
    minBlocksPerSm: readonly number[];
  };
  argmax: { loads: number };
  /** decode attention (cuda/attention.h) */
  attention: {
    threads: number;
    keysPerChunk: number;
    lanesPerKey: number;
    /** the fast kernel's (and the persistent body's) widest head */
    maxHeadSize: number;
    /** attention_wide_kernel's: the widest head the op takes */
    wideHeadSize: number;
    /** blocks an SM holds, which the splits over the keys fill: the fast kernel's, the wide one's */
    blocksPerSm: number;
    wideBlocksPerSm: number;
    /** splits whose partials the merge loads at once: one dependent L2 round trip each */
    mergeBatch: number;
    /** most splits per (row, K/V head's pass) */
    maxSplits: number;
  };
  /** the persistent step kernel (cuda/persistent.cu); minBlocksPerSm by the weights' (and cache's) storage type, per batch bucket */
  persistent: {
    threads: number;
    minBlocksPerSm: Readonly<Record<DtypeName, readonly number[]>>;
    laterRoundL2Trips: number;
  };
  /** each op's kernel's dependent L2 round trips besides its data stream */
  chainL2Trips: Readonly<Record<OpFamily, number>>;
}

/** Decodes the int32 words cu_kernel_facts filled. */
export function decodeKernelFacts(words: Int32Array): KernelFacts {
  const at = (field: Field, k = 0) => words[CU_KERNEL_FACTS.fields[field] / INT32 + k]!;
  const list = (field: Field, n: number, from = 0) => Array.from({ length: n }, (_, k) => at(field, from + k));
  const byDtype = (field: Field) =>
    Object.fromEntries(DTYPE_NAMES.map((d) => [d, list(field, BUCKETS, DTYPES[d] * BUCKETS)])) as Record<
      DtypeName,
      number[]
    >;
  return {
    accessBytes: at("access_bytes"),
    warpSize: at("warp_size"),
    batchBuckets: list("batch_buckets", BUCKETS),
    matvec: {
      threads: at("matvec_threads"),
      loads: at("matvec_loads"),
      rowsPerSplit: at("matvec_rows_per_split"),
      tileBytes: at("matvec_tile_bytes"),
      minBlocksPerSm: byDtype("matvec_min_blocks_per_sm"),
      headNormL2Trips: at("matvec_head_norm_l2_trips"),
    },
    lmHead: {
      threads: at("lm_head_threads"),
      rowsPerWarp: at("lm_head_rows_per_warp"),
      chunksPerBatch: at("lm_head_chunks_per_batch"),
      rowsPerBlock: at("lm_head_rows_per_block"),
      minBlocksPerSm: list("lm_head_min_blocks_per_sm", BUCKETS),
    },
    argmax: { loads: at("argmax_loads") },
    attention: {
      threads: at("attn_threads"),
      keysPerChunk: at("attn_keys_per_chunk"),
      lanesPerKey: at("attn_lanes_per_key"),
      maxHeadSize: at("attn_max_head_size"),
      wideHeadSize: at("attn_wide_head_size"),
      blocksPerSm: at("attn_blocks_per_sm"),
      wideBlocksPerSm: at("attn_wide_blocks_per_sm"),
      mergeBatch: at("attn_merge_batch"),
      maxSplits: at("attn_max_splits"),
    },
    persistent: {
      threads: at("persistent_threads"),
      minBlocksPerSm: byDtype("persistent_min_blocks_per_sm"),
      laterRoundL2Trips: at("persistent_later_round_l2_trips"),
    },
    chainL2Trips: Object.fromEntries(OP_FAMILIES.map((f) => [f, at("chain_l2_trips", OPS[f].code)])) as Record<
      OpFamily,
      number
    >,
  };
}

/** cu_kernel_facts as bun:ffi calls it. */
export interface KernelFactsSymbol {
  cu_kernel_facts(out: Int32Array): number;
}
export const KERNEL_FACTS_SYMBOL = { cu_kernel_facts: { args: [FFIType.ptr], returns: FFIType.i32 } } as const;

/** What the persistent step kernel is built for besides the fused plan (cuda/persistent.cu). */
export interface PersistentStepBuild {
  /** the widest head its attention body holds: wider heads run the per-op kernels only */
  maxHeadDim: number;
  /** a rotated head's row must be whole tiles of this many bytes for the 16-byte q/k/v body it holds */
  rotaryTileBytes: number;
}

export const persistentStepBuild = (facts: KernelFacts): PersistentStepBuild => ({
  maxHeadDim: facts.attention.maxHeadSize,
  rotaryTileBytes: facts.matvec.tileBytes,
});

/** The facts of an open library. */
export function readKernelFacts(symbols: KernelFactsSymbol): KernelFacts {
  const words = new Int32Array(CU_KERNEL_FACTS.bytes / INT32);
  const code = symbols.cu_kernel_facts(words);
  if (code !== 0)
    throw new Error(`cu_kernel_facts: batch_bucket gives more row counts than CuKernelFacts holds (${BUCKETS})`);
  return decodeKernelFacts(words);
}

/** The facts of the library at `path` (the CUDA or the emulator library: the same sources), opened for this alone. */
export function libraryKernelFacts(path: string): KernelFacts {
  const lib = dlopen(path, KERNEL_FACTS_SYMBOL);
  try {
    return readKernelFacts(lib.symbols as unknown as KernelFactsSymbol);
  } finally {
    lib.close();
  }
}

/** The batch bucket a launch of `rows` rows takes: the fewest that hold them. */
export function rowBucket(facts: KernelFacts, rows: number): number {
  return facts.batchBuckets.find((b) => b >= rows) ?? facts.batchBuckets[facts.batchBuckets.length - 1]!;
}

/** A per-bucket fact for a launch of `rows` rows. */
export const atBucket = (facts: KernelFacts, perBucket: readonly number[], rows: number) =>
  perBucket[facts.batchBuckets.indexOf(rowBucket(facts, rows))]!;

/** Elements of a storage type in one vector access (4 floats, 8 halves). */
export const perAccess = (facts: KernelFacts, dtype: DtypeName) => facts.accessBytes / DTYPE_BYTES[dtype];
