// The kernel model's inputs for a decode step, from what the code itself says: the plan's ops and their
// work (src/ops.ts), each launch's grid and block as the C launchers choose them (captured, not run), and the
// SASS facts of each kernel (loads in flight, registers, loads issued before the wait). Everything built from
// them is a prediction (src/profile/kernel-model.ts).
import type { LaunchShape } from "../backends/backend.ts";
import type { GPT2Config } from "../model/config.ts";
import { kernelFamily, namedArgs, type OpFamily } from "../ops.ts";
import { planShape, type PlanKind, type PlanOp } from "../plan.ts";
import { predictStep, type GpuModel, type KernelInput, type StepPrediction } from "../profile/kernel-model.ts";
import type { SassFacts } from "./sass-checks.ts";

/** cuda/linear.cu kMatvecRowsPerThread: weight rows (16-byte loads) per matvec thread. */
const MATVEC_ROWS_PER_THREAD = 8;
/** cuda/lm_head.cu kLmHeadVecPerLane: float4 of a vocabulary row per lane at a time. */
const LM_HEAD_VEC_PER_LANE = 8;
/** cuda/attention.cu: keys per chunk, threads per block, threads per key. */
const ATTN_KEYS_PER_CHUNK = 64, ATTN_THREADS = 256, ATTN_LANES_PER_KEY = 4;
const FLOATS_PER_LOAD = 4, WARP = 32;

/** 16-byte loads a thread of this op's kernel has for its arguments (the SASS may hold more, predicated off). */
export function activeLoads(op: PlanOp): number {
  switch (op.family) {
    case "linear": case "linear_residual": case "ln_qkv": case "ln_linear_gelu":
      return MATVEC_ROWS_PER_THREAD;
    case "lm_head": case "ln_lm_head_argmax": {
      const { C } = namedArgs(op.family, op.args);
      return Math.min(LM_HEAD_VEC_PER_LANE, Math.ceil(C / FLOATS_PER_LOAD / WARP));
    }
    case "attention": {
      const { C, n_head } = namedArgs("attention", op.args);
      const units = C / n_head / FLOATS_PER_LOAD;
      const parts = Math.floor(ATTN_THREADS / units);
      return Math.ceil(units / ATTN_LANES_PER_KEY) + Math.ceil(ATTN_KEYS_PER_CHUNK / parts);
    }
    case "argmax": return 4;
    case "layernorm": return 3; // a float4 of the row, its weight and its bias (C <= 1024)
    case "embed": case "kv_append": case "residual": return 2;
    case "gelu": return 1;
  }
}

/** The SASS facts of the kernel an op of `family` launches at T = 1 (its float4 instantiation, the matvec). */
export function factsFor(family: OpFamily, sass: readonly SassFacts[]): SassFacts | undefined {
  const mine = sass.filter((f) => kernelFamily(f.kernel) === family);
  const vec4 = mine.filter((f) => f.kernel.endsWith("<4>"));
  return vec4.find((f) => f.kernel.includes("matvec")) ?? vec4[0] ?? mine[0];
}

/** Registers assumed for a kernel whose SASS was not read. */
const UNREAD_REGISTERS = 64;

/** The model's view of each kernel of a decode step at `context`, launched as `shapes` says. */
export function kernelInputs(ops: readonly PlanOp[], context: number, shapes: readonly LaunchShape[], sass: readonly SassFacts[] | null): KernelInput[] {
  if (shapes.length !== ops.length) throw new Error(`${shapes.length} launch shapes for ${ops.length} ops`);
  return ops.map((op, i) => {
    const { grid, block } = shapes[i]!;
    const work = op.work(context);
    const facts = sass ? factsFor(op.family, sass) : undefined;
    const active = activeLoads(op);
    return {
      label: op.label,
      family: op.family,
      bytes: work.bytes,
      flops: work.flops,
      blocks: grid[0] * grid[1] * grid[2],
      threads: block[0] * block[1] * block[2],
      registers: facts?.registers ?? UNREAD_REGISTERS,
      loadsInFlight: Math.min(active, facts?.wideLoadsInFlight ?? active),
      prefetches: (facts?.wideLoadsBeforeWait ?? 0) > 0,
    };
  });
}

/** A decode step's prediction for a GPU, from the plan, its launch shapes (shapesOf) and the SASS facts. */
export function predictDecodeStep(
  config: GPT2Config, plan: PlanKind, context: number, gpu: GpuModel,
  shapesOf: (ops: PlanOp[]) => LaunchShape[], sass: readonly SassFacts[] | null,
): StepPrediction {
  const ops = planShape(config, 1, plan);
  return predictStep(kernelInputs(ops, context, shapesOf(ops), sass), gpu);
}
