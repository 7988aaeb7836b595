// A latency-and-bandwidth model of the decode step's kernels on a GPU, and of the step in each launch mode.
// EVERY NUMBER IT GIVES IS A PREDICTION: the parameters below are leads with ranges and sources, not
// measurements of this code, and the first GPU run calibrates them (the launch floor's graph node cost, the
// achieved bandwidth per kernel).
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
import type { OpFamily } from "../ops.ts";

/** A parameter's working value, its plausible range, and where it comes from. */
export interface Estimate {
  value: number;
  low: number;
  high: number;
  source: string;
}

export interface GpuModel {
  name: string;
  sms: number;
  maxThreadsPerSm: number;
  maxBlocksPerSm: number;
  registersPerSm: number;
  /** the most registers a thread may have, and the unit a thread's registers are allocated in */
  maxRegistersPerThread: number;
  registerUnit: number;
  /** streaming reads from device memory, bytes/s */
  bandwidth: Estimate;
  /** fp32 FMA throughput, FLOP/s */
  flops: Estimate;
  /** a device-memory round trip under load, µs */
  dramLatencyUs: Estimate;
  /** an L2 hit round trip, µs */
  l2LatencyUs: Estimate;
  /** host time to issue one launch from TypeScript through bun:ffi, and from C++ */
  eagerHostUs: Estimate;
  nativeHostUs: Estimate;
  /** the device's gap between two dependent kernels: back to back in a stream or in a graph */
  graphNodeUs: Estimate;
  /** the same with programmatic dependent launch; null where the GPU has none (before sm_90) */
  pdlNodeUs: Estimate | null;
  /** the persistent step's grid barrier between two ops: the last arrival seen by every waiting block */
  gridBarrierUs: Estimate;
}

const GRID_BARRIER = "estimate: the last block's release (MEMBAR.ALL.GPU: its stores acknowledged, an L2 round trip) and its atomic at L2, then a poller's acquire load seeing it, up to a 128 ns sleep late: 3 L2 round trips and half a sleep, ~0.5-0.8 µs; up to 2 µs with 264 pollers on one line (a review's figure for the sequentially consistent design it replaced: 1-2 µs); measured by `profile` on the device (1000 barriers in one cooperative launch, every block at once and with skewed arrivals, beside the sequentially consistent design), and calibrated by the first GPU run's persistent steps";

const LAUNCH_FLOOR = "calibrated by the launch floor `profile` measures on the device (empty kernels)";

/** The two GPUs of the study: the H200 lent here, and the A40 of the seed's experiment. */
export const GPU_MODELS = {
  h200: {
    name: "NVIDIA H200 (SXM)",
    sms: 132, maxThreadsPerSm: 2048, maxBlocksPerSm: 32, registersPerSm: 65536, maxRegistersPerThread: 255, registerUnit: 8,
    bandwidth: { value: 4.3e12, low: 4.0e12, high: 4.8e12, source: "device-to-device copy measured at ~4.3 TB/s on this workplace's H200 (KINDS.md, 2026-10-28 and 11-04); 4.8 TB/s datasheet" },
    flops: { value: 67e12, low: 50e12, high: 67e12, source: "datasheet fp32 (H200.md)" },
    dramLatencyUs: { value: 0.5, low: 0.3, high: 0.7, source: "lead: HBM round trips of several hundred ns unloaded in published Hopper microbenchmarks, more under load (issue 9: 0.3-0.6 µs)" },
    l2LatencyUs: { value: 0.15, low: 0.1, high: 0.3, source: "lead: ~200-300 cycles at 1.5-2 GHz in published Hopper figures" },
    eagerHostUs: { value: 4, low: 2.5, high: 6, source: `lead: cudaLaunchKernel ~2-3 µs plus one bun:ffi call (an empty CPU op costs 0.02-0.07 µs through bun:ffi on the dev VM, profiles/2026-11-30-cpu-*; issuing a 62-op eager step from TypeScript took 0.16-0.87 ms there); ${LAUNCH_FLOOR}` },
    nativeHostUs: { value: 2.5, low: 1.5, high: 4, source: `lead: cudaLaunchKernel from C++; ${LAUNCH_FLOOR}` },
    graphNodeUs: { value: 1.0, low: 0.6, high: 2.0, source: `lead: ~1 µs between dependent kernel nodes; ${LAUNCH_FLOOR}` },
    pdlNodeUs: { value: 0.4, low: 0.2, high: 0.8, source: "guess: the dependent grid is already resident and waiting; what remains is the predecessor's completion reaching it" },
    gridBarrierUs: { value: 0.7, low: 0.4, high: 2.0, source: GRID_BARRIER },
  },
  a40: {
    name: "NVIDIA A40",
    sms: 84, maxThreadsPerSm: 1536, maxBlocksPerSm: 16, registersPerSm: 65536, maxRegistersPerThread: 255, registerUnit: 8,
    bandwidth: { value: 0.6e12, low: 0.55e12, high: 0.696e12, source: "datasheet 696 GB/s (GDDR6, 384-bit); streaming reads typically reach ~85-90% of it" },
    flops: { value: 37.4e12, low: 30e12, high: 37.4e12, source: "datasheet fp32" },
    dramLatencyUs: { value: 0.6, low: 0.4, high: 0.8, source: "lead: GDDR6 round trips are somewhat longer than HBM's" },
    l2LatencyUs: { value: 0.2, low: 0.15, high: 0.3, source: "lead: Ampere L2 hits of ~200-300 cycles at ~1.7 GHz" },
    eagerHostUs: { value: 4, low: 2.5, high: 6, source: `as for the H200 (a host cost); ${LAUNCH_FLOOR}` },
    nativeHostUs: { value: 2.5, low: 1.5, high: 4, source: `as for the H200; ${LAUNCH_FLOOR}` },
    graphNodeUs: { value: 1.2, low: 0.8, high: 2.0, source: `lead; ${LAUNCH_FLOOR}` },
    pdlNodeUs: null,
    gridBarrierUs: { value: 0.9, low: 0.5, high: 2.4, source: GRID_BARRIER },
  },
} as const satisfies Record<string, GpuModel>;
export type GpuName = keyof typeof GPU_MODELS;

/** The GPU whose machine code the library holds (src/native/build.ts builds sm_90): its register file bounds a kernel's registers. */
export const SASS_GPU: GpuModel = GPU_MODELS.h200;

/** Registers per thread a kernel compiled for `blocks` resident blocks of `threads` per SM may use (its __launch_bounds__). */
export function registerBudget(gpu: GpuModel, threads: number, blocks: number): number {
  const share = Math.floor(gpu.registersPerSm / (blocks * threads) / gpu.registerUnit) * gpu.registerUnit;
  return Math.min(gpu.maxRegistersPerThread, share);
}

/** Families whose data come from device memory (weights, the KV cache); the rest touch activations in L2. */
const STREAMS_FROM_DRAM: ReadonlySet<OpFamily> = new Set<OpFamily>(["embed", "linear", "attention", "lm_head", "ln_qkv", "ln_linear_gelu", "linear_residual", "ln_lm_head_argmax"]);

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
function blocksPerSm(k: Pick<KernelInput, "threads" | "registers">, gpu: GpuModel, other?: Pick<KernelInput, "threads" | "registers">, besides = 0): number {
  const threads = gpu.maxThreadsPerSm - besides * (other?.threads ?? 0);
  const registers = gpu.registersPerSm - besides * (other ? other.registers * other.threads : 0);
  return Math.max(0, Math.min(gpu.maxBlocksPerSm - besides, Math.floor(threads / k.threads), Math.floor(registers / (k.registers * k.threads))));
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
  const fewer = Math.floor(prev.residentBlocks / gpu.sms), withOneMore = prev.residentBlocks % gpu.sms;
  const fit = withOneMore * blocksPerSm(k, gpu, prev, fewer + 1) + (gpu.sms - withOneMore) * blocksPerSm(k, gpu, prev, fewer);
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
  return { ...k, residentBlocks: resident, bytesInFlight, bandwidthUs, computeUs, latencyUs, streamUs, bound, chainUs, kernelUs: streamUs + chainUs };
}

/** The GPU with every estimate at the end of its range that makes a step faster, or slower. */
export function gpuAt(gpu: GpuModel, end: "optimistic" | "pessimistic"): GpuModel {
  const fast = end === "optimistic";
  const pick = (e: Estimate, higherIsFaster: boolean): Estimate => ({ ...e, value: fast === higherIsFaster ? e.high : e.low });
  return {
    ...gpu,
    bandwidth: pick(gpu.bandwidth, true),
    flops: pick(gpu.flops, true),
    dramLatencyUs: pick(gpu.dramLatencyUs, false),
    l2LatencyUs: pick(gpu.l2LatencyUs, false),
    eagerHostUs: pick(gpu.eagerHostUs, false),
    nativeHostUs: pick(gpu.nativeHostUs, false),
    graphNodeUs: pick(gpu.graphNodeUs, false),
    pdlNodeUs: gpu.pdlNodeUs && pick(gpu.pdlNodeUs, false),
    gridBarrierUs: pick(gpu.gridBarrierUs, false),
  };
}

/** A step at the GPU's working estimates (mid) and at the optimistic (fast) and pessimistic (slow) ends of their ranges. */
export interface PredictionRange {
  mid: StepPrediction;
  fast: StepPrediction;
  slow: StepPrediction;
}

export function predictRange(kernels: readonly KernelInput[], gpu: GpuModel, persistent: PersistentKernel | null = null): PredictionRange {
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
function persistentStep(kernels: readonly KernelInput[], gpu: GpuModel, { registers, laterRoundL2Trips }: PersistentKernel): number {
  const bodies = kernels.map((k) => predictKernel({ ...k, registers }, gpu));
  const barrierUs = gpu.gridBarrierUs.value;
  const grid = gpu.sms * Math.max(blocksPerSm({ threads: kernels[0]?.threads ?? 1, registers }, gpu), 1);
  return bodies.reduce((sum, k, i) => {
    const laterRoundsUs = (Math.ceil(k.blocks / grid) - 1) * laterRoundL2Trips * gpu.l2LatencyUs.value;
    const prev = bodies[i - 1];
    if (!prev) return sum + k.kernelUs + laterRoundsUs;
    const covered = Math.min(1, (k.lookAheadBytes * k.residentBlocks) / k.bytes);
    const savedUs = k.lookAheadBytes > 0 ? Math.min(prev.chainUs + barrierUs, covered * k.streamUs) : hiddenFirstTrip(k, prev, gpu);
    return sum + barrierUs + k.kernelUs + laterRoundsUs - savedUs;
  }, gpu.graphNodeUs.value);
}

/** persistent: the persistent step kernel, or null where the step has none. */
export function predictStep(kernels: readonly KernelInput[], gpu: GpuModel, persistent: PersistentKernel | null = null): StepPrediction {
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
