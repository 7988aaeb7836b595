// What the kernels' machine code must show, read from the built library's SASS (src/native/sass.ts) with no
// GPU: the hot kernels keep their 16-byte loads in flight together (and so does each body the persistent step
// kernel inlines, found by its source lines), nothing touches local memory, registers stay within the budget the
// launch shapes assume, and every kernel of the step waits for its predecessor and reads through coherent loads
// only (what programmatic dependent launch needs: cuda/launch.h), with no sequentially consistent fence, and the
// persistent step backs off between the polls of its grid barrier.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { PRESETS } from "../model/gpt2.ts";
import { ROOT } from "../native/build.ts";
import { atBucket, perAccess, type KernelFacts } from "../native/kernel-facts.ts";
import {
  decodeKernel,
  familiesWithBody,
  PERSISTENT_STEP_KERNEL,
  persistentStepKernel,
  STEP_ARCHS,
  type StepArch,
  wideAttentionKernel,
} from "../native/kernel-names.ts";
import {
  attachSourceLines,
  disassemble,
  findNvdisasm,
  fmaShare,
  isGlobalLoad,
  isWideLoad,
  loadFacts,
  type SassFunction,
} from "../native/sass.ts";
import { DTYPE_NAMES, kernelFamily, OPS, type DtypeName, type OpFamily } from "../ops.ts";
import { registerBudget, SASS_GPU } from "../profile/kernel-model/gpus.ts"; // not index.ts: the model's inputs read this file
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

/** Registers a thread of a kernel compiled for `blocks` blocks of `threads` per SM may use, and those blocks in words. */
function budget(threads: number, blocks: number): { maxRegisters: number; perSm: string } {
  return { maxRegisters: registerBudget(SASS_GPU, threads, blocks), perSm: `${blocks} blocks of ${threads} per SM` };
}

/** The head size the attention requirement's why clause counts units at: GPT-2's. */
const GPT2_HEAD_SIZE = PRESETS.gpt2!.n_embd / PRESETS.gpt2!.n_head;

/** The check's own register bound where no launch bound sets one: argmax and layernorm 64 registers. */
const SMALL_KERNEL_REGISTERS = 64;
/** Fewest 16-byte loads in flight the check asks of attention (a chunk's key and value rows; the wide kernel's rows are twice as long) and layernorm (the row, its weight and bias). */
const ATTENTION_LOADS = 8,
  WIDE_ATTENTION_LOADS = 2 * ATTENTION_LOADS,
  LAYERNORM_LOADS = 4,
  SWIGLU_LOADS = 2;

/** Every hot kernel's design, in every storage type and batch bucket the library is built for. */
export function sassRequirements(facts: KernelFacts): SassRequirement[] {
  const { matvec, lmHead } = facts;
  const lmHeadLoads = lmHead.rowsPerWarp * lmHead.chunksPerBatch;
  const attentionUnits = (dtype: DtypeName, headSize: number) =>
    (2 * headSize) / facts.attention.lanesPerKey / perAccess(facts, dtype);
  return [
    ...DTYPE_NAMES.flatMap((dtype) =>
      facts.batchBuckets.flatMap((rows): SassRequirement[] => [
        ...familiesWithBody("matvec").map((family) => {
          const b = budget(matvec.threads, atBucket(facts, matvec.minBlocksPerSm[dtype], rows));
          return {
            kernel: decodeKernel(facts, family, dtype, rows),
            minWideLoads: matvec.loads,
            maxRegisters: b.maxRegisters,
            why: `${matvec.loads} weight rows per thread in flight, every load feeding all rows (${rows}); <= ${b.maxRegisters} registers: ${b.perSm}`,
          };
        }),
        ...familiesWithBody("lm_head").map((family) => ({
          kernel: decodeKernel(facts, family, dtype, rows),
          minWideLoads: lmHeadLoads,
          maxRegisters: budget(lmHead.threads, atBucket(facts, lmHead.minBlocksPerSm, rows)).maxRegisters,
          why: `${lmHead.chunksPerBatch} chunks of each of ${lmHead.rowsPerWarp} vocabulary rows per lane, every load feeding all ${rows} rows`,
        })),
      ]),
    ),
    ...DTYPE_NAMES.map((dtype) => {
      const b = budget(facts.attention.threads, facts.attention.blocksPerSm);
      return {
        kernel: decodeKernel(facts, "attention", dtype, 1),
        minWideLoads: ATTENTION_LOADS,
        maxRegisters: b.maxRegisters,
        why: `a chunk's key and value rows issued together (${attentionUnits(dtype, GPT2_HEAD_SIZE)} of ${attentionUnits(dtype, facts.attention.maxHeadSize)} units used at head size ${GPT2_HEAD_SIZE}); ${b.perSm}`,
      };
    }),
    ...DTYPE_NAMES.map((dtype) => {
      const b = budget(facts.attention.threads, facts.attention.wideBlocksPerSm),
        wide = facts.attention.wideHeadSize;
      return {
        kernel: wideAttentionKernel(facts, dtype),
        minWideLoads: WIDE_ATTENTION_LOADS,
        maxRegisters: b.maxRegisters,
        why: `heads up to ${wide}: a chunk's key and value rows issued together (${attentionUnits(dtype, wide)} units at head size ${wide}); ${b.perSm}`,
      };
    }),
    {
      kernel: decodeKernel(facts, "argmax", "f32", 1),
      minWideLoads: facts.argmax.loads,
      maxRegisters: SMALL_KERNEL_REGISTERS,
      why: `${facts.argmax.loads} float4 of logits per thread in flight`,
    },
    {
      kernel: decodeKernel(facts, "layernorm", "f32", 1),
      minWideLoads: LAYERNORM_LOADS,
      maxRegisters: SMALL_KERNEL_REGISTERS,
      why: "the row, its weight and its bias in one pass",
    },
    {
      kernel: decodeKernel(facts, "rmsnorm", "f32", 1),
      minWideLoads: LAYERNORM_LOADS,
      maxRegisters: SMALL_KERNEL_REGISTERS,
      why: "the row and its weight in one pass (the Llama family's norm)",
    },
    {
      kernel: decodeKernel(facts, "swiglu", "f32", 1),
      minWideLoads: SWIGLU_LOADS,
      maxRegisters: SMALL_KERNEL_REGISTERS,
      why: "a float4 of gate and of up issued together",
    },
  ];
}

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
const isPersistent = (kernel: string) => kernel.startsWith(`${PERSISTENT_STEP_KERNEL}<`);

/** The op family a task kind runs the body of, by its name (cuda/step_tasks.h StepTaskKind: kTaskLnQkv → ln_qkv), or null. */
export function taskFamily(kind: string): OpFamily | null {
  const family = kind
    .replace(/^kTask/, "")
    .replace(/(?<=[a-z0-9])(?=[A-Z])/g, "_")
    .toLowerCase();
  return family in OPS ? (family as OpFamily) : null;
}

/**
 * The lines of each body's run in cuda/persistent.cu (its text: the `StepBody<kTask…>` rows), each with its task
 * kind: an instruction inlined through one of them belongs to that kind's body.
 */
export function runTaskCases(source: string): Map<number, string> {
  const cases = new Map<number, string>();
  let kind: string | null = null,
    inRun = false,
    depth = 0;
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
 * The architecture's step each body runs in (cuda/step_tasks.h STEP_TASK_KINDS: `X(kTaskLnQkv, kStepGpt2)`), by task
 * kind; null: every architecture's step (kStepNone).
 */
export function bodyArchs(stepTasksSource: string): Map<string, StepArch | null> {
  return new Map(
    [...stepTasksSource.matchAll(/X\((kTask\w+), kStep(\w+)\)/g)].map(([, kind, arch]) => [
      kind!,
      arch === "None" ? null : (`${arch}Step` as StepArch),
    ]),
  );
}

/**
 * 16-byte loads in flight of each body in `bodies` (task kinds) a persistent step kernel inlines: the instructions
 * whose source lines pass through that kind's run (cases: runTaskCases). Null where its SASS carries
 * no source lines (attachSourceLines).
 */
function persistentBodyLoads(
  f: SassFunction,
  cases: Map<number, string>,
  bodies: readonly string[],
): Map<string, number | null> | null {
  if (!f.instructions.some((i) => i.source?.length)) return null;
  const kinds = f.instructions.map((i) =>
    i.source?.map((s) => (s.file.endsWith("/persistent.cu") ? cases.get(s.line) : undefined)).find((k) => k),
  );
  return new Map(
    bodies
      .filter((kind) => kinds.includes(kind))
      .map((kind) => [kind, loadFacts(f, (k) => kinds[k] === kind).wideLoadsInFlight]),
  );
}

/** For each persistent step instantiation, the standalone kernel of each op family whose body it runs (the same template arguments). */
function ownKernels(facts: KernelFacts): Map<string, (family: OpFamily) => string> {
  return new Map(
    STEP_ARCHS.flatMap((arch) =>
      DTYPE_NAMES.flatMap((dtype) =>
        facts.batchBuckets.map(
          (rows) =>
            [
              persistentStepKernel(facts, arch, dtype, rows),
              (family: OpFamily) => decodeKernel(facts, family, dtype, rows),
            ] as const,
        ),
      ),
    ),
  );
}

/** The built library's kernels; the persistent step kernels' with their source lines where nvdisasm is found. */
export function librarySassFunctions(
  libraryPath: string,
  cuobjdump: string,
  nvdisasm = findNvdisasm(),
): SassFunction[] {
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

/**
 * One row: every hot body of every persistent step kernel holds at least its own kernel's required loads in flight.
 * The bodies are run_task's cases (cuda/persistent.cu) whose op family has a hot kernel (a requirement).
 */
function persistentBodiesRow(
  functions: SassFunction[],
  facts: KernelFacts,
  requirements: SassRequirement[],
): CheckRow | null {
  const persistent = functions.filter((f) => isPersistent(f.kernel));
  if (persistent.length === 0) return null;
  const cases = runTaskCases(readFileSync(join(ROOT, "cuda/persistent.cu"), "utf8"));
  const hot = new Set(requirements.map((r) => kernelFamily(r.kernel)));
  const bodies = [...new Set(cases.values())].flatMap((kind) => {
    const family = taskFamily(kind);
    return family && hot.has(family) ? [{ kind, family }] : [];
  });
  const own = ownKernels(facts);
  const short: string[] = [],
    seen = new Set<string>();
  const archs = bodyArchs(readFileSync(join(ROOT, "cuda/step_tasks.h"), "utf8"));
  for (const f of persistent) {
    const arch = f.kernel.slice(`${PERSISTENT_STEP_KERNEL}<`.length).split(",")[0];
    const runs = bodies.filter((b) => [null, arch].includes(archs.get(b.kind) ?? null));
    const loads = persistentBodyLoads(
      f,
      cases,
      runs.map((b) => b.kind),
    );
    if (!loads)
      return {
        check: "sass persistent bodies",
        detail: `not read: no source lines in ${f.kernel} (${f.noSourceLines ?? "a library built without -lineinfo"})`,
        error: null,
        status: "skip",
      };
    for (const { kind, family } of runs) {
      const ownKernel = own.get(f.kernel)?.(family);
      const need = requirements.find((r) => r.kernel === ownKernel)?.minWideLoads;
      const have = loads.get(kind) ?? 0;
      seen.add(`${family} ${have}`);
      if (need === undefined)
        short.push(`${f.kernel} ${family}: no requirement for ${ownKernel ?? "an unknown instantiation"}`);
      else if (have < need) short.push(`${f.kernel} ${family} ${have} (< ${need})`);
    }
  }
  const detail = short.length
    ? `too few 16-byte loads in flight: ${short.join("; ")}`
    : `${persistent.length} persistent step kernels: every inlined body keeps its own kernel's 16-byte loads in flight (${[...seen].sort().join(", ")})`;
  return verdict("sass persistent bodies", detail, short.length === 0);
}

/** The runtime's own kernels (fills, the FMA peak, the empty launch): not part of a step. */
const isStepKernel = (kernel: string) => !kernel.startsWith("runtime_");

const verdict = (check: string, detail: string, ok: boolean): CheckRow => ({
  check,
  detail,
  error: null,
  status: ok ? "pass" : "fail",
});

/** One row per requirement and per library-wide rule; `facts`: the library's kernel facts (cu_kernel_facts). */
export function sassChecks(
  functions: SassFunction[],
  facts: KernelFacts,
  requirements = sassRequirements(facts),
): CheckRow[] {
  const read = functions.map(sassFacts);
  const rows = requirements.map((r) => {
    const f = read.find((x) => x.kernel === r.kernel);
    if (!f) return verdict(`sass ${r.kernel}`, "not in the library", false);
    const loads = f.wideLoadsInFlight ?? 0;
    const ok = loads >= r.minWideLoads && f.registers !== null && f.registers <= r.maxRegisters;
    const detail = `${loads} x 16-byte loads in flight (>= ${r.minWideLoads}), ${f.registers ?? "?"} registers (<= ${r.maxRegisters})`;
    return verdict(`sass ${r.kernel}`, detail, ok);
  });
  const local = read.filter((f) => f.localAccesses > 0).map((f) => f.kernel);
  rows.push(
    verdict(
      "sass local memory",
      local.length ? `LDL/STL in ${local.join(", ")}` : "no kernel touches local memory",
      local.length === 0,
    ),
  );
  const bodies = persistentBodiesRow(functions, facts, requirements);
  if (bodies) rows.push(bodies);
  const persistent = read.filter((f) => isPersistent(f.kernel));
  const blind = persistent.filter((f) => f.l2Prefetches === 0).map((f) => f.kernel);
  if (persistent.length > 0) {
    rows.push(
      verdict(
        "sass persistent look-ahead",
        blind.length
          ? `no L2 prefetch in ${blind.join(", ")}`
          : `${persistent.length} persistent step kernels request the next op's weights into L2 (CCTL.E.PF2)`,
        blind.length === 0,
      ),
    );
  }
  const fenced = read.filter((f) => isStepKernel(f.kernel) && f.scFences > 0).map((f) => `${f.kernel} (${f.scFences})`);
  rows.push(
    verdict(
      "sass fences",
      fenced.length
        ? `sequentially consistent fences (MEMBAR.SC) in ${fenced.join(", ")}`
        : "no step kernel has a sequentially consistent fence: the merges and the grid barrier release and acquire (cuda/device_counter.h)",
      fenced.length === 0,
    ),
  );
  if (persistent.length > 0) {
    const spinning = persistent.filter((f) => f.sleeps === 0).map((f) => f.kernel);
    rows.push(
      verdict(
        "sass persistent poll",
        spinning.length
          ? `no NANOSLEEP in ${spinning.join(", ")}: the grid barrier's poll does not back off`
          : `${persistent.length} persistent step kernels sleep between the grid barrier's polls (NANOSLEEP)`,
        spinning.length === 0,
      ),
    );
  }
  const unsafe = read
    .filter((f) => isStepKernel(f.kernel) && (!f.waits || f.nonCoherentLoads > 0))
    .map((f) => f.kernel);
  rows.push(
    verdict(
      "sass programmatic launch",
      unsafe.length
        ? `no wait, or non-coherent loads, in ${unsafe.join(", ")}`
        : "every step kernel waits for its predecessor and loads coherently",
      unsafe.length === 0,
    ),
  );
  return rows;
}
