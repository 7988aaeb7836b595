// What the kernels' machine code must show, read from the built library's SASS (src/native/sass.ts) with no
// GPU: the hot kernels keep their 16-byte loads in flight together, nothing touches local memory, registers stay
// within the budget the launch shapes assume, and every kernel of the step waits for its predecessor and reads
// through coherent loads only (what programmatic dependent launch needs: cuda/launch.h).
import { isGlobalLoad, isWideLoad, loadFacts, type SassFunction } from "../native/sass.ts";
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

const MATVEC = {
  minWideLoads: 8,
  maxRegisters: 64,
  why: "8 weight rows per thread in flight; <= 64 registers: 4 blocks of 256 per SM, the largest grid (288 blocks) resident at once",
};
const LM_HEAD = { minWideLoads: 8, maxRegisters: 64, why: "8 float4 of a vocabulary row per lane (6 used at C = 768); 4 blocks per SM" };

export const SASS_REQUIREMENTS: SassRequirement[] = [
  { kernel: "linear_matvec_kernel<4>", ...MATVEC },
  { kernel: "ln_qkv_kernel<4>", ...MATVEC },
  { kernel: "ln_linear_gelu_kernel<4>", ...MATVEC },
  { kernel: "linear_residual_kernel<4>", ...MATVEC },
  { kernel: "lm_head_kernel", ...LM_HEAD },
  { kernel: "ln_lm_head_argmax_kernel", ...LM_HEAD },
  {
    kernel: "attention_kernel<4>", minWideLoads: 8, maxRegisters: 128,
    why: "a chunk's key and value rows issued together (8 of 16 units used at head size 64); 2 blocks of 256 per SM",
  },
  { kernel: "argmax_kernel", minWideLoads: 4, maxRegisters: 64, why: "4 float4 of logits per thread in flight" },
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
  const unsafe = facts.filter((f) => isStepKernel(f.kernel) && (!f.waits || f.nonCoherentLoads > 0)).map((f) => f.kernel);
  rows.push(verdict("sass programmatic launch",
    unsafe.length ? `no wait, or non-coherent loads, in ${unsafe.join(", ")}` : "every step kernel waits for its predecessor and loads coherently",
    unsafe.length === 0));
  return rows;
}
