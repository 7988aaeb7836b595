// What the kernels' machine code must show, read from the built library's SASS (src/native/sass.ts) with no
// GPU: the hot kernels keep their 16-byte loads in flight together (and so does each body the persistent step
// kernel inlines, found by its source lines), nothing touches local memory, registers stay within the budget the
// launch shapes assume, and every kernel of the step waits for its predecessor and reads through coherent loads
// only (what programmatic dependent launch needs: cuda/launch.h), with no sequentially consistent fence, and the
// persistent step backs off between the polls of its grid barrier.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { ROOT } from "../native/build.ts";
import { attachSourceLines, disassemble, findNvdisasm, fmaShare, isGlobalLoad, isWideLoad, loadFacts, type SassFunction } from "../native/sass.ts";
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
/** The persistent step kernel's instantiation for weights and cache in `dtype` and `rows` rows (cuda/persistent.cu). */
export const persistentStepKernel = (dtype: DtypeName, rows: number) => `persistent_step_kernel<${ELEMENT_TYPES[dtype].type}, ${rowBucket(rows)}>`;
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
  /** sequentially consistent fences (MEMBAR.SC: what __threadfence() compiles to), which no barrier or merge needs */
  scFences: number;
  /** NANOSLEEP: a poll that backs off */
  sleeps: number;
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
    scFences: f.instructions.filter((i) => /^MEMBAR\.SC(\.|$)/.test(i.opcode)).length,
    sleeps: f.instructions.filter((i) => i.opcode === "NANOSLEEP").length,
  };
}

// ---- the persistent step kernel's bodies ------------------------------------------------------------------------
const isPersistent = (kernel: string) => kernel.startsWith("persistent_step_kernel<");
/** The task kinds whose body is a hot kernel's (cuda/step_tasks.h StepTaskKind), and that kernel's family. */
const PERSISTENT_BODIES = {
  kTaskLnQkv: "ln_qkv", kTaskAttention: "attention", kTaskLnLinearGelu: "ln_linear_gelu",
  kTaskLinearResidual: "linear_residual", kTaskLnLmHeadArgmax: "ln_lm_head_argmax",
} as const;
type BodyKind = keyof typeof PERSISTENT_BODIES;

/**
 * The lines of each body's run in cuda/persistent.cu (its text: the `StepBody<kTask…>` rows), each with its task
 * kind: an instruction inlined through one of them belongs to that kind's body.
 */
export function runTaskCases(source: string): Map<number, string> {
  const cases = new Map<number, string>();
  let kind: string | null = null, inRun = false, depth = 0;
  source.split("\n").forEach((text, k) => {
    kind = /^template <> struct StepBody<(kTask\w+)>/.exec(text)?.[1] ?? kind;
    if (kind && /\bvoid run\(/.test(text)) inRun = true;
    if (!kind || !inRun) return;
    cases.set(k + 1, kind);
    depth += (text.match(/{/g)?.length ?? 0) - (text.match(/}/g)?.length ?? 0);
    if (depth === 0) inRun = false; // the run function's closing brace
  });
  return cases;
}

/**
 * 16-byte loads in flight of each hot body a persistent step kernel inlines, by task kind: the instructions whose
 * source lines pass through that kind's run (cases: runTaskCases). Null where its SASS carries no
 * source lines (attachSourceLines).
 */
function persistentBodyLoads(f: SassFunction, cases: Map<number, string>): Partial<Record<BodyKind, number | null>> | null {
  if (!f.instructions.some((i) => i.source?.length)) return null;
  const kinds = f.instructions.map((i) => i.source?.map((s) => (s.file.endsWith("/persistent.cu") ? cases.get(s.line) : undefined)).find((k) => k));
  const out: Partial<Record<BodyKind, number | null>> = {};
  for (const kind of Object.keys(PERSISTENT_BODIES) as BodyKind[])
    if (kinds.includes(kind)) out[kind] = loadFacts(f, (k) => kinds[k] === kind).wideLoadsInFlight;
  return out;
}

/** For each persistent step instantiation, the standalone kernel each hot body must match. */
const OWN_KERNELS = new Map(DTYPE_NAMES.flatMap((dtype) => ROW_BUCKETS.map((rows) => [
  persistentStepKernel(dtype, rows),
  (kind: BodyKind) => {
    const family = PERSISTENT_BODIES[kind];
    return family === "attention" ? storageKernel("attention_kernel", dtype) : weightKernel(family, dtype, rows);
  },
] as const)));

/** The built library's kernels; the persistent step kernels' with their source lines where nvdisasm is found. */
export function librarySassFunctions(libraryPath: string, cuobjdump: string, nvdisasm = findNvdisasm()): SassFunction[] {
  const functions = disassemble(libraryPath, cuobjdump);
  const persistent = functions.filter((f) => isPersistent(f.kernel));
  let why: string | null = nvdisasm ? null : "no nvdisasm in $CUDA_HOME/bin or ../shared/cuda-binutils";
  if (nvdisasm) {
    try {
      attachSourceLines(persistent, libraryPath, "persistent", { cuobjdump, nvdisasm });
    } catch (e) {
      why = (e as Error).message;
    }
  }
  if (why) for (const f of persistent) f.noSourceLines = why;
  return functions;
}

/** One row: every hot body of every persistent step kernel holds at least its own kernel's required loads in flight. */
function persistentBodiesRow(functions: SassFunction[], requirements: SassRequirement[]): CheckRow | null {
  const persistent = functions.filter((f) => isPersistent(f.kernel));
  if (persistent.length === 0) return null;
  const cases = runTaskCases(readFileSync(join(ROOT, "cuda/persistent.cu"), "utf8"));
  const short: string[] = [], seen = new Set<string>();
  for (const f of persistent) {
    const loads = persistentBodyLoads(f, cases);
    if (!loads) return { check: "sass persistent bodies", detail: `not read: no source lines in ${f.kernel} (${f.noSourceLines ?? "a library built without -lineinfo"})`, error: null, status: "skip" };
    for (const kind of Object.keys(PERSISTENT_BODIES) as BodyKind[]) {
      const own = OWN_KERNELS.get(f.kernel)?.(kind);
      const need = requirements.find((r) => r.kernel === own)?.minWideLoads;
      const have = loads[kind] ?? 0;
      seen.add(`${PERSISTENT_BODIES[kind]} ${have}`);
      if (need === undefined) short.push(`${f.kernel} ${PERSISTENT_BODIES[kind]}: no requirement for ${own ?? "an unknown instantiation"}`);
      else if (have < need) short.push(`${f.kernel} ${PERSISTENT_BODIES[kind]} ${have} (< ${need})`);
    }
  }
  const detail = short.length ? `too few 16-byte loads in flight: ${short.join("; ")}`
    : `${persistent.length} persistent step kernels: every inlined body keeps its own kernel's 16-byte loads in flight (${[...seen].sort().join(", ")})`;
  return verdict("sass persistent bodies", detail, short.length === 0);
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
  const bodies = persistentBodiesRow(functions, requirements);
  if (bodies) rows.push(bodies);
  const persistent = facts.filter((f) => isPersistent(f.kernel));
  const blind = persistent.filter((f) => f.l2Prefetches === 0).map((f) => f.kernel);
  if (persistent.length > 0) {
    rows.push(verdict("sass persistent look-ahead",
      blind.length ? `no L2 prefetch in ${blind.join(", ")}` : `${persistent.length} persistent step kernels request the next op's weights into L2 (CCTL.E.PF2)`,
      blind.length === 0));
  }
  const fenced = facts.filter((f) => isStepKernel(f.kernel) && f.scFences > 0).map((f) => `${f.kernel} (${f.scFences})`);
  rows.push(verdict("sass fences",
    fenced.length ? `sequentially consistent fences (MEMBAR.SC) in ${fenced.join(", ")}`
      : "no step kernel has a sequentially consistent fence: the merges and the grid barrier release and acquire (cuda/device_counter.h)",
    fenced.length === 0));
  if (persistent.length > 0) {
    const spinning = persistent.filter((f) => f.sleeps === 0).map((f) => f.kernel);
    rows.push(verdict("sass persistent poll",
      spinning.length ? `no NANOSLEEP in ${spinning.join(", ")}: the grid barrier's poll does not back off`
        : `${persistent.length} persistent step kernels sleep between the grid barrier's polls (NANOSLEEP)`,
      spinning.length === 0));
  }
  const unsafe = facts.filter((f) => isStepKernel(f.kernel) && (!f.waits || f.nonCoherentLoads > 0)).map((f) => f.kernel);
  rows.push(verdict("sass programmatic launch",
    unsafe.length ? `no wait, or non-coherent loads, in ${unsafe.join(", ")}` : "every step kernel waits for its predecessor and loads coherently",
    unsafe.length === 0));
  return rows;
}
