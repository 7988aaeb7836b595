// The kernel model's inputs for a decode step, from what the code itself says: the plan's ops and their
// work (src/ops.ts: bytes by storage type, FLOPs by batch), each launch's grid and block as the C launchers choose
// them (captured, not run), the kernels' geometry and dependent chains as the library exports them
// (cu_kernel_facts), and the SASS facts of the instantiation each op launches (loads in flight, registers, loads
// issued before the wait, FFMA's share of the instructions). Everything built from them is a prediction (model.ts).
import type { KernelLaunches, LaunchShape } from "../../backends/backend.ts";
import type { ModelConfig } from "../../model/architectures.ts";
import { atBucket, perAccess, persistentStepBuild, type KernelFacts } from "../../native/kernel-facts.ts";
import {
  DECODE_KERNELS,
  decodeKernel,
  persistentStepKernel,
  tiledLinearKernel,
  wideAttentionKernel,
} from "../../native/kernel-names.ts";
import { disassemble, findCuobjdump } from "../../native/sass.ts";
import { DTYPE_BYTES, dtypeOf, kernelFamily, MAX_BATCH, namedArgs } from "../../ops.ts";
import { encodePlan, planOp, type PlanOp, type StepForm } from "../../plan.ts";
import { planShapeOf, stepArchOf } from "../../plans.ts";
import { modeForm, persistentStepRuns } from "../../run/launch-modes.ts";
import { sassFacts, type SassFacts } from "../../verify/sass-checks.ts";
import { registerBudget, SASS_GPU, type GpuModel } from "./gpus.ts";
import { predictStep, type KernelInput, type PersistentKernel, type StepPrediction } from "./model.ts";

/** 16-byte loads a thread of this op's kernel has for its arguments (the SASS may hold more, predicated off). */
export function activeLoads(op: PlanOp, facts: KernelFacts): number {
  switch (op.family) {
    case "linear":
    case "linear_residual":
    case "ln_qkv":
    case "ln_linear_gelu":
    case "rms_qkv_rope":
    case "rms_gate_up":
      return facts.matvec.loads;
    case "lm_head":
    case "ln_lm_head_argmax":
    case "rms_lm_head_argmax": {
      const { C, wdtype } = namedArgs(op.family, op.args);
      const { rowsPerWarp, chunksPerBatch } = facts.lmHead;
      const chunksPerLane = Math.ceil(C / perAccess(facts, dtypeOf(wdtype)) / facts.warpSize);
      return rowsPerWarp * Math.min(chunksPerBatch, chunksPerLane);
    }
    case "attention": {
      const { C, n_head, kvdtype } = namedArgs("attention", op.args);
      const { threads, lanesPerKey, keysPerChunk } = facts.attention;
      const units = C / n_head / perAccess(facts, dtypeOf(kvdtype));
      const parts = Math.floor(threads / units);
      return Math.ceil(units / lanesPerKey) + Math.ceil(keysPerChunk / parts);
    }
    case "argmax":
      return facts.argmax.loads;
    case "layernorm":
      return 3; // a float4 of the row, its weight and its bias (C <= 1024)
    case "rmsnorm":
      return 2; // a float4 of the row and of its weight (C <= 1024)
    case "rope": {
      const { C, n_head } = namedArgs("rope", op.args);
      return 3 * Math.ceil(C / n_head / facts.warpSize); // a lane's elements of its head, their cos and sin (floats)
    }
    case "embed":
    case "kv_append":
    case "residual":
    case "swiglu":
      return 2;
    case "gelu":
      return 1;
  }
}

/**
 * Attention's splits over the keys that have keys at `context` (one decode row: context + 1 visible keys), of the
 * launch's grid.x: the rest return at once, neither reading nor arriving (cuda/attention.h).
 */
function attentionParts(context: number, splits: number, facts: KernelFacts): number {
  return Math.min(splits, Math.ceil((context + 1) / facts.attention.keysPerChunk));
}

/**
 * Blocks of the launch that work, and the dependent L2 round trips after their data. Attention's merging block reads
 * its parts a batch at a time, for its heads' elements a thread each, as many rounds as its threads take to cover
 * them (cuda/attention.h merge_splits).
 */
function workingGrid(op: PlanOp, context: number, grid: LaunchShape["grid"], facts: KernelFacts) {
  const [x, y, z] = grid;
  if (op.family !== "attention") return { blocks: x * y * z, chainL2Trips: facts.chainL2Trips[op.family] };
  const { C, n_head, n_kv_head } = namedArgs("attention", op.args);
  const { threads, mergeBatch } = facts.attention;
  const headsPerBlock = Math.min(n_head / n_kv_head, threads / facts.warpSize);
  const headsAtOnce = Math.floor(threads / (C / n_head));
  const parts = attentionParts(context, x, facts);
  return {
    blocks: parts * y * z,
    chainL2Trips: facts.chainL2Trips.attention + Math.ceil(headsPerBlock / headsAtOnce) * Math.ceil(parts / mergeBatch),
  };
}

/** The round trips Qwen3's q/k norms add to the q/k/v matvec's chain (cuda/linear.h matvec_head_norm); else 0. */
function headNormTrips(op: PlanOp, facts: KernelFacts): number {
  return op.family === "rms_qkv_rope" && namedArgs("rms_qkv_rope", op.args).q_norm ? facts.matvec.headNormL2Trips : 0;
}

/**
 * The persistent step's look-ahead for an op at `context` (cuda/persistent.cu look_ahead_of): the bytes one virtual
 * block requests into L2 before the barrier ahead of the op (a matvec's weights of its tile, the LM head's first
 * vocabulary rows, attention's chunk of earlier keys and values); 0 for an op it has none for.
 */
function lookAheadBytes(op: PlanOp, context: number, facts: KernelFacts): number {
  switch (op.family) {
    case "attention": {
      const { C, n_head, kvdtype } = namedArgs("attention", op.args);
      return 2 * Math.min(facts.attention.keysPerChunk, context) * (C / n_head) * DTYPE_BYTES[dtypeOf(kvdtype)];
    }
    case "ln_qkv":
    case "ln_linear_gelu":
    case "linear_residual":
    case "rms_qkv_rope":
    case "rms_gate_up":
      return Math.min(facts.matvec.rowsPerSplit, namedArgs(op.family, op.args).C) * facts.matvec.tileBytes;
    case "ln_lm_head_argmax":
    case "rms_lm_head_argmax": {
      const { C, V, wdtype } = namedArgs(op.family, op.args);
      return Math.min(facts.lmHead.rowsPerBlock, V) * C * DTYPE_BYTES[dtypeOf(wdtype)];
    }
    default:
      return 0;
  }
}

/** The kernel the launchers pick for an op on 16-byte-aligned buffers (planShape's pointers are). */
export function kernelOf(op: PlanOp, facts: KernelFacts): string {
  const args = namedArgs(op.family, op.args) as Readonly<Record<string, number>>;
  const kernel = DECODE_KERNELS[op.family];
  switch (kernel.of) {
    case "weights": {
      const rows = args.B ?? args.rows!,
        weights = dtypeOf(args.wdtype!);
      return op.family === "linear" && rows > MAX_BATCH
        ? tiledLinearKernel(weights)
        : decodeKernel(facts, op.family, weights, rows);
    }
    case "storage": {
      const storage = dtypeOf(args[kernel.dtype]!);
      return op.family === "attention" && args.C! / args.n_head! > facts.attention.maxHeadSize
        ? wideAttentionKernel(facts, storage)
        : decodeKernel(facts, op.family, storage, 1);
    }
    default:
      return decodeKernel(facts, op.family, "f32", 1);
  }
}

/** SASS facts of the built CUDA library, or null (and why) where no disassembler is found. */
export function librarySass(libraryPath: string): { facts: SassFacts[] | null; note: string } {
  const cuobjdump = findCuobjdump();
  if (!cuobjdump)
    return { facts: null, note: "no cuobjdump found: the kernels' design loads and 64 registers assumed" };
  return {
    facts: disassemble(libraryPath, cuobjdump).map(sassFacts),
    note: "loads in flight and registers from the SASS of the library that ran",
  };
}

/** The SASS facts of the kernel an op launches (kernelOf), else of any kernel of its family. */
export function factsFor(op: PlanOp, sass: readonly SassFacts[], facts: KernelFacts): SassFacts | undefined {
  const name = kernelOf(op, facts);
  return sass.find((f) => f.kernel === name) ?? sass.find((f) => kernelFamily(f.kernel) === op.family);
}

/** Registers assumed for a kernel whose SASS was not read. */
const UNREAD_REGISTERS = 64;

/**
 * The model's view of each kernel of a decode step at `context`, launched as `shapes` says (each op's launches),
 * built as `facts` says. An op of several launches (the LM head, one per group of rows its shared memory holds) is
 * as many kernels, each the op at its group's rows: reading the weights, its rows' activations, its instantiation.
 */
export function kernelInputs(
  ops: readonly PlanOp[],
  context: number,
  shapes: readonly (readonly LaunchShape[])[],
  facts: KernelFacts,
  sass: readonly SassFacts[] | null,
): KernelInput[] {
  if (shapes.length !== ops.length) throw new Error(`${shapes.length} ops' launch shapes for ${ops.length} ops`);
  return ops.flatMap((op, i) => {
    const launches = shapes[i]!;
    if (launches.length === 0) throw new Error(`${op.label} launches no kernel`);
    const parts = launches.length === 1 ? [op] : rowGroups(op, launches.length);
    return launches.map(({ grid, block }, k) => kernelInput(parts[k]!, context, grid, block, k, facts, sass));
  });
}

/**
 * An op of B sequences launched `launches` times as the launchers split it: groups of the largest power of two
 * rows that makes that many launches (cuda/lm_head.cu halves its rows per launch from MAX_BATCH), the last group
 * the rest; each the op at its rows.
 */
export function rowGroups(op: PlanOp, launches: number): PlanOp[] {
  const args = namedArgs(op.family, op.args) as Record<string, number>;
  const B = args.B!;
  let per = MAX_BATCH;
  while (per > 1 && Math.ceil(B / per) < launches) per /= 2;
  if (Math.ceil(B / per) !== launches) throw new Error(`${op.label}: ${launches} launches for ${B} rows`);
  return Array.from({ length: launches }, (_, k) =>
    planOp(op.family, op.label, op.layer, { ...args, B: Math.min(per, B - k * per) } as never),
  );
}

function kernelInput(
  op: PlanOp,
  context: number,
  grid: LaunchShape["grid"],
  block: LaunchShape["block"],
  launch: number,
  facts: KernelFacts,
  sass: readonly SassFacts[] | null,
): KernelInput {
  const { blocks, chainL2Trips } = workingGrid(op, context, grid, facts);
  const read = sass ? factsFor(op, sass, facts) : undefined;
  const active = activeLoads(op, facts);
  const work = op.work(context);
  return {
    label: launch === 0 ? op.label : `${op.label} (launch ${launch + 1})`,
    family: op.family,
    bytes: work.bytes,
    flops: work.flops,
    blocks,
    threads: block[0] * block[1] * block[2],
    registers: read?.registers ?? UNREAD_REGISTERS,
    loadsInFlight: Math.min(active, read?.wideLoadsInFlight ?? active),
    prefetches: (read?.wideLoadsBeforeWait ?? 0) > 0,
    lookAheadBytes: lookAheadBytes(op, context, facts),
    fmaShare: read?.fmaShare ?? 1,
    chainL2Trips: chainL2Trips + headNormTrips(op, facts),
    loadBytes: facts.accessBytes,
  };
}

/** A decode step's kernels as the model reads them: the plan, its launch shapes and kernel facts from the library, and the SASS facts. */
export function decodeKernelInputs(
  config: ModelConfig,
  form: StepForm,
  context: number,
  kernels: KernelLaunches,
  sass: readonly SassFacts[] | null,
): KernelInput[] {
  const ops = planShapeOf(config, 1, form);
  return kernelInputs(ops, context, kernels.launchShapes(encodePlan(ops)), kernels.facts, sass);
}

/**
 * The persistent step kernel of a step (cuda/persistent.cu), or null where the step has none: its registers per
 * thread from the SASS, or the most its launch bounds allow where that was not read.
 */
export function persistentKernel(
  config: ModelConfig,
  form: StepForm,
  facts: KernelFacts,
  sass: readonly SassFacts[] | null,
): PersistentKernel | null {
  if (!persistentStepRuns(modeForm(form, config), persistentStepBuild(facts))) return null;
  const { threads, minBlocksPerSm, laterRoundL2Trips } = facts.persistent;
  const name = persistentStepKernel(facts, stepArchOf(config), form.weights, form.batch);
  const compiledFor = registerBudget(SASS_GPU, threads, atBucket(facts, minBlocksPerSm[form.weights], form.batch));
  return { registers: sass?.find((f) => f.kernel === name)?.registers ?? compiledFor, laterRoundL2Trips };
}

/** A decode step's prediction for a GPU. */
export function predictDecodeStep(
  config: ModelConfig,
  form: StepForm,
  context: number,
  gpu: GpuModel,
  kernels: KernelLaunches,
  sass: readonly SassFacts[] | null,
): StepPrediction {
  return predictStep(
    decodeKernelInputs(config, form, context, kernels, sass),
    gpu,
    persistentKernel(config, form, kernels.facts, sass),
  );
}
