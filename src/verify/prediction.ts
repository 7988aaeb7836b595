// The kernel model's inputs for a decode step, from what the code itself says: the plan's ops and their
// work (src/ops.ts: bytes by storage type, FLOPs by batch), each launch's grid and block as the C launchers choose
// them (captured, not run), and the SASS facts of the instantiation each op launches (loads in flight, registers,
// loads issued before the wait, FFMA's share of the instructions). Everything built from them is a prediction
// (src/profile/kernel-model.ts).
import type { LaunchShape } from "../backends/backend.ts";
import type { GPT2Config } from "../model/config.ts";
import { DTYPE_BYTES, dtypeOf, kernelFamily, MAX_BATCH, namedArgs, type DtypeName } from "../ops.ts";
import { planShape, type PlanOp, type StepForm } from "../plan.ts";
import { predictStep, type GpuModel, type KernelInput, type StepPrediction } from "../profile/kernel-model.ts";
import { persistentStepRuns } from "../run/launch-modes.ts";
import { elementType, persistentStepKernel, storageKernel, weightKernel, type SassFacts } from "./sass-checks.ts";

/** cuda/linear.cu kMatvecLoads: weight rows (16-byte loads) per matvec thread. */
const MATVEC_LOADS = 8;
/** cuda/lm_head.cu: vocabulary rows per warp, and chunks (16-byte loads) of each per lane and batch. */
const LM_HEAD_ROWS_PER_WARP = 4, LM_HEAD_CHUNKS_PER_BATCH = 2;
/** cuda/attention.cu: keys per chunk, threads per block, threads per key. */
const ATTN_KEYS_PER_CHUNK = 64, ATTN_THREADS = 256, ATTN_LANES_PER_KEY = 4;
const LOAD_BYTES = 16, WARP = 32;
/** cuda/linear.h: weight rows per matvec block (a split of C) and bytes of each in its column tile (8 groups of 16 bytes). */
const MATVEC_ROWS_PER_SPLIT = 256, MATVEC_TILE_BYTES = 128;
/** cuda/lm_head.h: vocabulary rows an LM head block's warps take first (8 warps x 4 rows). */
const LM_HEAD_ROWS_PER_BLOCK = 32;
/** Elements of a storage type per 16-byte load. */
const perLoad = (dtype: DtypeName) => LOAD_BYTES / DTYPE_BYTES[dtype];

/** 16-byte loads a thread of this op's kernel has for its arguments (the SASS may hold more, predicated off). */
export function activeLoads(op: PlanOp): number {
  switch (op.family) {
    case "linear": case "linear_residual": case "ln_qkv": case "ln_linear_gelu":
      return MATVEC_LOADS;
    case "lm_head": case "ln_lm_head_argmax": {
      const { C, wdtype } = namedArgs(op.family, op.args);
      const chunksPerLane = Math.ceil(C / perLoad(dtypeOf(wdtype)) / WARP);
      return LM_HEAD_ROWS_PER_WARP * Math.min(LM_HEAD_CHUNKS_PER_BATCH, chunksPerLane);
    }
    case "attention": {
      const { C, n_head, kvdtype } = namedArgs("attention", op.args);
      const units = C / n_head / perLoad(dtypeOf(kvdtype));
      const parts = Math.floor(ATTN_THREADS / units);
      return Math.ceil(units / ATTN_LANES_PER_KEY) + Math.ceil(ATTN_KEYS_PER_CHUNK / parts);
    }
    case "argmax": return 4;
    case "layernorm": return 3; // a float4 of the row, its weight and its bias (C <= 1024)
    case "embed": case "kv_append": case "residual": return 2;
    case "gelu": return 1;
  }
}

/**
 * The persistent step's look-ahead for an op at `context` (cuda/persistent.cu look_ahead_of): the bytes one virtual
 * block requests into L2 before the barrier ahead of the op (a matvec's weights of its tile, the LM head's first
 * vocabulary rows, attention's chunk of earlier keys and values); 0 for an op it has none for.
 */
function lookAheadBytes(op: PlanOp, context: number): number {
  switch (op.family) {
    case "attention": {
      const { C, n_head, kvdtype } = namedArgs("attention", op.args);
      return 2 * Math.min(ATTN_KEYS_PER_CHUNK, context) * (C / n_head) * DTYPE_BYTES[dtypeOf(kvdtype)];
    }
    case "ln_qkv": case "ln_linear_gelu": case "linear_residual":
      return Math.min(MATVEC_ROWS_PER_SPLIT, namedArgs(op.family, op.args).C) * MATVEC_TILE_BYTES;
    case "ln_lm_head_argmax": {
      const { C, V, wdtype } = namedArgs("ln_lm_head_argmax", op.args);
      return Math.min(LM_HEAD_ROWS_PER_BLOCK, V) * C * DTYPE_BYTES[dtypeOf(wdtype)];
    }
    default:
      return 0;
  }
}

/** The kernel the launchers pick for an op on 16-byte-aligned buffers (every pointer of planShape is 0). */
export function kernelOf(op: PlanOp): string | null {
  switch (op.family) {
    case "linear": {
      const { rows, wdtype } = namedArgs("linear", op.args);
      return rows > MAX_BATCH ? `linear_tiled_kernel<${elementType(dtypeOf(wdtype))}>` : weightKernel("linear", dtypeOf(wdtype), rows);
    }
    case "ln_qkv": case "ln_linear_gelu": case "linear_residual": case "lm_head": case "ln_lm_head_argmax": {
      const { B, wdtype } = namedArgs(op.family, op.args) as { B: number; wdtype: number };
      return weightKernel(op.family, dtypeOf(wdtype), B);
    }
    case "attention": case "kv_append": {
      const { kvdtype } = namedArgs(op.family, op.args) as { kvdtype: number };
      return storageKernel(`${op.family}_kernel`, dtypeOf(kvdtype));
    }
    case "embed": return storageKernel("embed_kernel", dtypeOf(namedArgs("embed", op.args).wdtype));
    case "argmax": case "layernorm": return `${op.family}_kernel<4>`;
    case "gelu": case "residual": return `${op.family}_kernel`;
  }
}

/** The SASS facts of the kernel an op launches (kernelOf), else of any kernel of its family. */
export function factsFor(op: PlanOp, sass: readonly SassFacts[]): SassFacts | undefined {
  const name = kernelOf(op);
  return sass.find((f) => f.kernel === name) ?? sass.find((f) => kernelFamily(f.kernel) === op.family);
}

/** Registers assumed for a kernel whose SASS was not read. */
const UNREAD_REGISTERS = 64;

/** The model's view of each kernel of a decode step at `context`, launched as `shapes` says. */
export function kernelInputs(ops: readonly PlanOp[], context: number, shapes: readonly LaunchShape[], sass: readonly SassFacts[] | null): KernelInput[] {
  if (shapes.length !== ops.length) throw new Error(`${shapes.length} launch shapes for ${ops.length} ops`);
  return ops.map((op, i) => {
    const { grid, block } = shapes[i]!;
    const work = op.work(context);
    const facts = sass ? factsFor(op, sass) : undefined;
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
      lookAheadBytes: lookAheadBytes(op, context),
      fmaShare: facts?.fmaShare ?? 1,
    };
  });
}

/** A decode step's kernels as the model reads them: the plan, its launch shapes (shapesOf, captured once) and the SASS facts. */
export function decodeKernelInputs(
  config: GPT2Config, form: StepForm, context: number, shapesOf: (ops: PlanOp[]) => LaunchShape[], sass: readonly SassFacts[] | null,
): KernelInput[] {
  const ops = planShape(config, 1, form);
  return kernelInputs(ops, context, shapesOf(ops), sass);
}

/** cuda/persistent.cu step_min_blocks_per_sm: two blocks of 256 per SM (128 registers), one for batched 16-bit steps. */
const persistentMaxRegisters = (form: StepForm) => (DTYPE_BYTES[form.weights] < 4 && form.batch > 2 ? 255 : 128);

/** The persistent step kernel's instantiation for a step (cuda/persistent.cu), or null where the step has none. */
function persistentKernel(form: StepForm): string | null {
  if (!persistentStepRuns(form)) return null;
  return persistentStepKernel(form.weights, form.batch);
}

/** Its registers per thread (from the SASS; the most it is compiled for where that was not read), or null. */
export function persistentRegisters(form: StepForm, sass: readonly SassFacts[] | null): number | null {
  const kernel = persistentKernel(form);
  if (kernel === null) return null;
  return sass?.find((f) => f.kernel === kernel)?.registers ?? persistentMaxRegisters(form);
}

/** A decode step's prediction for a GPU. */
export function predictDecodeStep(
  config: GPT2Config, form: StepForm, context: number, gpu: GpuModel, shapesOf: (ops: PlanOp[]) => LaunchShape[], sass: readonly SassFacts[] | null,
): StepPrediction {
  return predictStep(decodeKernelInputs(config, form, context, shapesOf, sass), gpu, persistentRegisters(form, sass));
}
