// What the kernels' machine code must show, read from the built library's SASS (src/native/sass.ts) with no
// GPU: the hot kernels keep their 16-byte loads in flight together, nothing touches local memory, registers stay
// within the budget the launch shapes assume, and every kernel of the step waits for its predecessor and reads
// through coherent loads only (what programmatic dependent launch needs: cuda/launch.h).
import { fmaShare, isGlobalLoad, isWideLoad, loadFacts, type SassFunction } from "../native/sass.ts";
import { DTYPE_NAMES, MAX_BATCH, type DtypeName } from "../ops.ts";
import type { CheckRow } from "./model-checks.ts";

/** A hot kernel's design, as the SASS must show it. */
export interface SassRequirement {
  kernel: string;
  /** fewest 16-byte global loads a thread has in flight before it uses one of them (loadFacts) */
  minWideLoads: number;
  maxRegisters: number;
  /** why these numbers */
  why: string;
}

/** The C++ element type of each storage type (cuda/dtypes.h), and its elements per 16-byte load. */
const ELEMENT_TYPES: Record<DtypeName, { type: string; vector: number }> = {
  f32: { type: "float", vector: 4 }, bf16: { type: "__nv_bfloat16", vector: 8 }, f16: { type: "__half", vector: 8 },
};
/** Rows (sequences) a matvec or LM head instantiation accumulates at once: a launch takes the fewest that hold its rows. */
export const ROW_BUCKETS = [1, 2, 4, MAX_BATCH] as const;
export const rowBucket = (rows: number) => ROW_BUCKETS.find((b) => b >= rows) ?? MAX_BATCH;

const MATVEC_KERNELS = { linear: "linear_matvec_kernel", ln_qkv: "ln_qkv_kernel", ln_linear_gelu: "ln_linear_gelu_kernel", linear_residual: "linear_residual_kernel" } as const;
const LM_HEAD_KERNELS = { lm_head: "lm_head_kernel", ln_lm_head_argmax: "ln_lm_head_argmax_kernel" } as const;

/** The 16-byte-load instantiation of a matvec or LM head kernel for weights in `dtype` and `rows` rows. */
export function weightKernel(family: keyof typeof MATVEC_KERNELS | keyof typeof LM_HEAD_KERNELS, dtype: DtypeName, rows: number): string {
  const base = family in MATVEC_KERNELS ? MATVEC_KERNELS[family as keyof typeof MATVEC_KERNELS] : LM_HEAD_KERNELS[family as keyof typeof LM_HEAD_KERNELS];
  const { type, vector } = ELEMENT_TYPES[dtype];
  return `${base}<${type}, ${vector}, ${rowBucket(rows)}>`;
}
/** The C++ element type of a storage type (cuda/dtypes.h). */
export const elementType = (dtype: DtypeName) => ELEMENT_TYPES[dtype].type;
/** The 16-byte-load instantiation of a kernel templated on one storage type (attention and kv_append: the cache's; embed: the tables'). */
export const storageKernel = (base: string, dtype: DtypeName) => `${base}<${ELEMENT_TYPES[dtype].type}, ${ELEMENT_TYPES[dtype].vector}>`;

const WHY_MATVEC = "8 weight rows per thread in flight, every load feeding all rows";
/** Registers a matvec instantiation may use: 3 blocks of 256 per SM (80) up to 32 accumulators, else 2 (128). */
const matvecRegisters = (dtype: DtypeName, rows: number) => (rows * ELEMENT_TYPES[dtype].vector <= 32 ? 80 : 128);
/** Registers an LM head instantiation may use: 4, 3 or 2 blocks of 256 per SM for 1, 2, or 4-8 rows. */
const lmHeadRegisters = (rows: number) => (rows <= 1 ? 64 : rows <= 2 ? 80 : 128);

export const SASS_REQUIREMENTS: SassRequirement[] = [
  ...DTYPE_NAMES.flatMap((dtype) => ROW_BUCKETS.flatMap((rows): SassRequirement[] => [
    ...(Object.keys(MATVEC_KERNELS) as (keyof typeof MATVEC_KERNELS)[]).map((family) => ({
      kernel: weightKernel(family, dtype, rows), minWideLoads: 8, maxRegisters: matvecRegisters(dtype, rows),
      why: `${WHY_MATVEC} (${rows}); <= ${matvecRegisters(dtype, rows)} registers: ${matvecRegisters(dtype, rows) === 80 ? 3 : 2} blocks of 256 per SM`,
    })),
    ...(Object.keys(LM_HEAD_KERNELS) as (keyof typeof LM_HEAD_KERNELS)[]).map((family) => ({
      kernel: weightKernel(family, dtype, rows), minWideLoads: 8, maxRegisters: lmHeadRegisters(rows),
      why: `2 chunks of each of 4 vocabulary rows per lane, every load feeding all ${rows} rows`,
    })),
  ])),
  ...DTYPE_NAMES.map((dtype) => ({
    kernel: storageKernel("attention_kernel", dtype), minWideLoads: 8, maxRegisters: 128,
    why: `a chunk's key and value rows issued together (${dtype === "f32" ? "8 of 16" : "4 of 8"} units used at head size 64); 2 blocks of 256 per SM`,
  })),
  { kernel: "argmax_kernel<4>", minWideLoads: 4, maxRegisters: 64, why: "4 float4 of logits per thread in flight" },
  { kernel: "layernorm_kernel<4>", minWideLoads: 4, maxRegisters: 64, why: "the row, its weight and its bias in one pass" },
];

/** The facts of one kernel the checks and the kernel model use. */
export interface SassFacts {
  kernel: string;
  registers: number | null;
  /** loadFacts: 16-byte loads in flight per thread (null: none) */
  wideLoadsInFlight: number | null;
  /** 16-byte loads issued before the first wait for the predecessor (prefetched under programmatic launch) */
  wideLoadsBeforeWait: number;
  localAccesses: number;
  /** whether the kernel waits for its predecessor (griddepcontrol.wait: ACQBULK) */
  waits: boolean;
  /** non-coherent (.CONSTANT) global loads: ptxas may move those across the wait */
  nonCoherentLoads: number;
  /** FFMA's share of the instructions where most of them are (fmaShare; null: none): the fp32 peak's attainable share */
  fmaShare: number | null;
  /** requests that L2 fetch a line nothing waits for (prefetch.global.L2: CCTL.E.PF2), the persistent step's look-ahead */
  l2Prefetches: number;
}

export function sassFacts(f: SassFunction): SassFacts {
  const wait = f.instructions.findIndex((i) => i.opcode === "ACQBULK");
  const beforeWait = wait < 0 ? [] : f.instructions.slice(0, wait);
  const facts = loadFacts(f);
  return {
    kernel: f.kernel,
    registers: f.registers ?? null,
    wideLoadsInFlight: facts.wideLoadsInFlight,
    wideLoadsBeforeWait: beforeWait.filter(isWideLoad).length,
    localAccesses: facts.localAccesses,
    waits: wait >= 0,
    nonCoherentLoads: f.instructions.filter((i) => isGlobalLoad(i) && /\.CONSTANT(\.|$)/.test(i.opcode)).length,
    fmaShare: fmaShare(f),
    l2Prefetches: f.instructions.filter((i) => /^CCTL(\.[A-Z0-9]+)*\.PF2$/.test(i.opcode)).length,
  };
}

/** The runtime's own kernels (fills, the FMA peak, the empty launch): not part of a step. */
const isStepKernel = (kernel: string) => !kernel.startsWith("runtime_");

const verdict = (check: string, detail: string, ok: boolean): CheckRow => ({ check, detail, error: null, status: ok ? "pass" : "fail" });

/** One row per requirement and per library-wide rule. */
export function sassChecks(functions: SassFunction[], requirements = SASS_REQUIREMENTS): CheckRow[] {
  const facts = functions.map(sassFacts);
  const rows = requirements.map((r) => {
    const f = facts.find((x) => x.kernel === r.kernel);
    if (!f) return verdict(`sass ${r.kernel}`, "not in the library", false);
    const loads = f.wideLoadsInFlight ?? 0;
    const ok = loads >= r.minWideLoads && f.registers !== null && f.registers <= r.maxRegisters;
    const detail = `${loads} x 16-byte loads in flight (>= ${r.minWideLoads}), ${f.registers ?? "?"} registers (<= ${r.maxRegisters})`;
    return verdict(`sass ${r.kernel}`, detail, ok);
  });
  const local = facts.filter((f) => f.localAccesses > 0).map((f) => f.kernel);
  rows.push(verdict("sass local memory", local.length ? `LDL/STL in ${local.join(", ")}` : "no kernel touches local memory", local.length === 0));
  const persistent = facts.filter((f) => f.kernel.startsWith("persistent_step_kernel"));
  const blind = persistent.filter((f) => f.l2Prefetches === 0).map((f) => f.kernel);
  if (persistent.length > 0) {
    rows.push(verdict("sass persistent look-ahead",
      blind.length ? `no L2 prefetch in ${blind.join(", ")}` : `${persistent.length} persistent step kernels request the next op's weights into L2 (CCTL.E.PF2)`,
      blind.length === 0));
  }
  const unsafe = facts.filter((f) => isStepKernel(f.kernel) && (!f.waits || f.nonCoherentLoads > 0)).map((f) => f.kernel);
  rows.push(verdict("sass programmatic launch",
    unsafe.length ? `no wait, or non-coherent loads, in ${unsafe.join(", ")}` : "every step kernel waits for its predecessor and loads coherently",
    unsafe.length === 0));
  return rows;
}
