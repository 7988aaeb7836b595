// A latency-and-bandwidth model of the decode step's kernels on a GPU, and of the step in each launch mode.
// EVERY NUMBER IT GIVES IS A PREDICTION: its GPUs' parameters (gpus.ts) are leads with ranges and sources, not
// measurements of this code, and the first GPU run calibrates them (the launch floor's graph node cost, the
// achieved bandwidth per kernel); its inputs are read from the code (inputs.ts).
//
// A kernel moves `bytes` (its fewest bytes, the op table's work: weights and cache in their storage type, read
// once for all the step's sequences) with `blocks x threads` threads of which the GPU holds `resident` at once
// (threads and registers per SM), each with `loadsInFlight` 16-byte loads outstanding (read from the SASS, at most
// what the shape gives a thread), and does `flops`, its multiply-adds a share `fmaShare` of the instructions it
// issues (read from the SASS: the SM issues one instruction per lane and cycle, FFMA or not). Then
//   stream  = max(bytes / bandwidth, flops / (fp32 rate x fmaShare), latency x bytes / bytes in flight)
//   kernel  = stream + chain x L2 latency       (the dependent steps after the data arrive: merges, reductions)
// where latency is a DRAM round trip for kernels that stream weights or the KV cache, an L2 round trip for
// those that only touch activations. A step sums its kernels with each mode's per-launch cost:
//   eager, eager-native: the host issues launch i at (i + 1) x host cost; kernel i starts at the later of
//                        that and kernel i-1's end plus the device's gap between kernels
//   graph:               sum of (kernel + graph node gap)
//   graph-pdl:           sum of (kernel - hidden + programmatic node gap), hidden = the first DRAM round trip
//                        of a kernel that issues its loads before waiting for its predecessor, as far as the
//                        predecessor's own non-streaming time covers it, for the share of its blocks that fit on
//                        the SMs beside the predecessor's (registers, threads, block slots): the rest start only as
//                        the predecessor's blocks leave
//   persistent:          one graph node + sum of (kernel' + rounds' + grid barrier - saved) over the ops after the
//                        first, kernel' = the op's body run by the persistent kernel's resident blocks (its
//                        registers set how many); rounds' = for an op of more virtual blocks than resident ones,
//                        each later round's dependent steps: its loads from L2 (requested there before the wait),
//                        its partial stored and counted; saved = the share of its memory phase its look-ahead covers
//                        (what every resident block's first virtual block reads, requested into L2 right behind the
//                        block's loads of the previous op), at most the previous op's merge and the barrier, when the
//                        memory would idle; else the hidden first round trip as for graph-pdl
import type { OpFamily } from "../../ops.ts";
import { gpuAt, type GpuModel } from "./gpus.ts";

/** Families whose data come from device memory (weights, the KV cache); the rest touch activations in L2. */
const STREAMS_FROM_DRAM: ReadonlySet<OpFamily> = new Set<OpFamily>([
  "embed",
  "linear",
  "attention",
  "lm_head",
  "ln_qkv",
  "ln_linear_gelu",
  "linear_residual",
  "ln_lm_head_argmax",
  "rms_qkv_rope",
  "rms_gate_up",
  "rms_lm_head_argmax",
]);

/** One kernel launch as the model sees it. */
export interface KernelInput {
  label: string;
  family: OpFamily;
  bytes: number;
  flops: number;
  blocks: number;
  threads: number;
  registers: number;
  /** 16-byte loads each thread has outstanding at once */
  loadsInFlight: number;
  /** whether it issues loads before waiting for its predecessor (programmatic launch hides their latency) */
  prefetches: boolean;
  /**
   * the persistent step's look-ahead: bytes of weights one virtual block's first lines come to, requested into L2
   * before the barrier ahead of the op (cuda/persistent.cu prefetch_task; 0: the op has none)
   */
  lookAheadBytes: number;
  /** FFMA's share of the instructions its arithmetic issues (1: every instruction a multiply-add) */
  fmaShare: number;
  /** dependent L2 round trips besides its data stream (cu_kernel_facts: merges, reductions, the position read first) */
  chainL2Trips: number;
  /** bytes of one of its vector loads */
  loadBytes: number;
}

export interface KernelPrediction extends KernelInput {
  residentBlocks: number;
  bytesInFlight: number;
  bandwidthUs: number;
  /** the arithmetic at the fp32 rate its instruction mix allows */
  computeUs: number;
  latencyUs: number;
  streamUs: number;
  /** which term sets streamUs */
  bound: "memory" | "compute" | "latency";
  chainUs: number;
  /** predicted device time of the kernel alone */
  kernelUs: number;
}

/** Blocks of `k` one SM holds beside `besides` blocks of `other` (registers, threads and block slots; shared memory is not modelled). */
function blocksPerSm(
  k: Pick<KernelInput, "threads" | "registers">,
  gpu: GpuModel,
  other?: Pick<KernelInput, "threads" | "registers">,
  besides = 0,
): number {
  const threads = gpu.maxThreadsPerSm - besides * (other?.threads ?? 0);
  const registers = gpu.registersPerSm - besides * (other ? other.registers * other.threads : 0);
  return Math.max(
    0,
    Math.min(
      gpu.maxBlocksPerSm - besides,
      Math.floor(threads / k.threads),
      Math.floor(registers / (k.registers * k.threads)),
    ),
  );
}

export function residentBlocks(k: Pick<KernelInput, "blocks" | "threads" | "registers">, gpu: GpuModel): number {
  return Math.min(k.blocks, gpu.sms * Math.max(blocksPerSm(k, gpu), 1));
}

/**
 * Blocks of `k` that start while its predecessor's resident blocks still hold the SMs (programmatic launch: the
 * dependent grid is scheduled once every block of the predecessor has started), spread as the block scheduler
 * spreads the predecessor's: some SMs one block more than the others.
 */
export function blocksBeside(k: KernelPrediction, prev: KernelPrediction, gpu: GpuModel): number {
  const fewer = Math.floor(prev.residentBlocks / gpu.sms),
    withOneMore = prev.residentBlocks % gpu.sms;
  const fit =
    withOneMore * blocksPerSm(k, gpu, prev, fewer + 1) + (gpu.sms - withOneMore) * blocksPerSm(k, gpu, prev, fewer);
  return Math.min(k.blocks, fit);
}

export function predictKernel(k: KernelInput, gpu: GpuModel): KernelPrediction {
  const resident = residentBlocks(k, gpu);
  const bytesInFlight = Math.max(resident * k.threads * k.loadsInFlight * k.loadBytes, 1);
  const roundTripUs = STREAMS_FROM_DRAM.has(k.family) ? gpu.dramLatencyUs.value : gpu.l2LatencyUs.value;
  const bandwidthUs = (k.bytes / gpu.bandwidth.value) * 1e6;
  const latencyUs = roundTripUs * Math.max(1, k.bytes / bytesInFlight);
  const computeUs = (k.flops / (gpu.flops.value * k.fmaShare)) * 1e6;
  const streamUs = Math.max(bandwidthUs, computeUs, latencyUs);
  const bound = streamUs === bandwidthUs ? "memory" : streamUs === computeUs ? "compute" : "latency";
  const chainUs = k.chainL2Trips * gpu.l2LatencyUs.value;
  return {
    ...k,
    residentBlocks: resident,
    bytesInFlight,
    bandwidthUs,
    computeUs,
    latencyUs,
    streamUs,
    bound,
    chainUs,
    kernelUs: streamUs + chainUs,
  };
}

/** A step at the GPU's working estimates (mid) and at the optimistic (fast) and pessimistic (slow) ends of their ranges. */
export interface PredictionRange {
  mid: StepPrediction;
  fast: StepPrediction;
  slow: StepPrediction;
}

export function predictRange(
  kernels: readonly KernelInput[],
  gpu: GpuModel,
  persistent: PersistentKernel | null = null,
): PredictionRange {
  const at = (g: GpuModel) => predictStep(kernels, g, persistent);
  return { mid: at(gpu), fast: at(gpuAt(gpu, "optimistic")), slow: at(gpuAt(gpu, "pessimistic")) };
}

/** The modes a step is predicted in (src/run/launch-modes.ts names). */
export type ModelMode = "eager" | "eager-native" | "graph" | "graph-pdl" | "persistent";
export const MODEL_MODES: readonly ModelMode[] = ["eager", "eager-native", "graph", "graph-pdl", "persistent"];

export interface StepPrediction {
  kernels: KernelPrediction[];
  /** sum of the kernels alone */
  kernelSumUs: number;
  /** every byte once at the bandwidth: no version runs much faster */
  bytesFloorUs: number;
  /** the step in each mode (null: the GPU has no such launches) */
  modes: Record<ModelMode, number | null>;
}

/** Issued from the host at hostUs per launch; the device runs kernels in order with gapUs between them. */
function hostIssued(kernels: readonly KernelPrediction[], hostUs: number, gapUs: number): number {
  let end = 0;
  kernels.forEach((k, i) => {
    end = Math.max((i + 1) * hostUs, end + gapUs) + k.kernelUs;
  });
  return end;
}

/** A kernel's first DRAM round trip, hidden where it issues its loads before waiting, as far as its predecessor's time not spent streaming covers it. */
function hiddenFirstTrip(k: KernelPrediction, prev: KernelPrediction | undefined, gpu: GpuModel): number {
  const cover = prev ? prev.kernelUs - prev.bandwidthUs : 0;
  return k.prefetches ? Math.min(gpu.dramLatencyUs.value, k.latencyUs, Math.max(cover, 0)) : 0;
}

/**
 * The kernels one after another, with `nodeUs` between them, each hiding its first round trip behind its
 * predecessor where it prefetches, in the share of its blocks that start beside the predecessor's.
 */
function programmatic(kernels: readonly KernelPrediction[], gpu: GpuModel, nodeUs: number): number {
  return kernels.reduce((sum, k, i) => {
    const prev = kernels[i - 1];
    const early = prev ? blocksBeside(k, prev, gpu) / k.blocks : 0;
    return sum + k.kernelUs - early * hiddenFirstTrip(k, prev, gpu) + nodeUs;
  }, 0);
}

/** The persistent step kernel as the model sees it. */
export interface PersistentKernel {
  /** registers per thread (from its SASS, or the most it is compiled for) */
  registers: number;
  /**
   * dependent L2 round trips of each round of an op after its first (virtual blocks beyond the resident ones): its
   * loads, requested into L2 before the wait, its partial stored, its count (cu_kernel_facts)
   */
  laterRoundL2Trips: number;
}

/**
 * The step as the persistent kernel runs it (its registers set how many blocks are resident): every op's body on the
 * kernel's resident blocks, one graph node for the whole step, and between two ops a grid barrier. Across it the
 * memory would idle for the previous op's dependent tail (its merge) and the barrier. An op with a look-ahead
 * (lookAheadBytes: what one virtual block's first lines come to, which every resident block requests into L2 right
 * behind its own loads of the previous op, so they are queued before that idle time begins) has the share of its
 * memory phase (its bandwidth, or latency, term) those lines cover done there, as far as the idle time reaches.
 * An op without one hides its own loads issued before the wait, as under graph-pdl. An op of more virtual blocks
 * than the kernel keeps resident runs in rounds, each later one adding its dependent steps (laterRoundL2Trips).
 */
function persistentStep(
  kernels: readonly KernelInput[],
  gpu: GpuModel,
  { registers, laterRoundL2Trips }: PersistentKernel,
): number {
  const bodies = kernels.map((k) => predictKernel({ ...k, registers }, gpu));
  const barrierUs = gpu.gridBarrierUs.value;
  const grid = gpu.sms * Math.max(blocksPerSm({ threads: kernels[0]?.threads ?? 1, registers }, gpu), 1);
  return bodies.reduce((sum, k, i) => {
    const laterRoundsUs = (Math.ceil(k.blocks / grid) - 1) * laterRoundL2Trips * gpu.l2LatencyUs.value;
    const prev = bodies[i - 1];
    if (!prev) return sum + k.kernelUs + laterRoundsUs;
    const covered = Math.min(1, (k.lookAheadBytes * k.residentBlocks) / k.bytes);
    const savedUs =
      k.lookAheadBytes > 0 ? Math.min(prev.chainUs + barrierUs, covered * k.streamUs) : hiddenFirstTrip(k, prev, gpu);
    return sum + barrierUs + k.kernelUs + laterRoundsUs - savedUs;
  }, gpu.graphNodeUs.value);
}

/** persistent: the persistent step kernel, or null where the step has none. */
export function predictStep(
  kernels: readonly KernelInput[],
  gpu: GpuModel,
  persistent: PersistentKernel | null = null,
): StepPrediction {
  const predicted = kernels.map((k) => predictKernel(k, gpu));
  const kernelSumUs = predicted.reduce((s, k) => s + k.kernelUs, 0);
  const bytesFloorUs = (predicted.reduce((s, k) => s + k.bytes, 0) / gpu.bandwidth.value) * 1e6;
  return {
    kernels: predicted,
    kernelSumUs,
    bytesFloorUs,
    modes: {
      eager: hostIssued(predicted, gpu.eagerHostUs.value, gpu.graphNodeUs.value),
      "eager-native": hostIssued(predicted, gpu.nativeHostUs.value, gpu.graphNodeUs.value),
      graph: kernelSumUs + predicted.length * gpu.graphNodeUs.value,
      "graph-pdl": gpu.pdlNodeUs ? programmatic(predicted, gpu, gpu.pdlNodeUs.value) : null,
      persistent: persistent === null ? null : persistentStep(kernels, gpu, persistent),
    },
  };
}
