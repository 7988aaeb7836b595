// The CUDA backend: hand-written kernels in libgpt2_cuda.so, launched eagerly (one FFI call per kernel),
// eagerly from C++ (one FFI call per step), or replayed as a CUDA graph. `emulated` loads the same .cu
// sources compiled for the CPU (libgpt2_emu.so): every code path runs, slowly, without a GPU.
import { UserError } from "../errors.ts";
import { ensureBuilt, hasNvcc, hasPrebuilt } from "../native/build.ts";
import {
  CUDA_SYMBOLS,
  CU_DEVICE_INFO,
  CU_LAUNCH_SHAPE,
  decodeDeviceInfo,
  type CuDeviceInfo,
} from "../native/cuda-symbols.ts";
import { probeDriver } from "../native/driver.ts";
import {
  persistentStepBuild,
  readKernelFacts,
  type KernelFactsSymbol,
  type PersistentStepBuild,
} from "../native/kernel-facts.ts";
import { MAX_BATCH } from "../ops.ts";
import { encodePlan, type EncodedPlan } from "../plan.ts";
import type { GridBarrierMeasurement } from "./cuda-instrument.ts";
import {
  HOST_STUDY_DEFAULTS,
  type BackendDescription,
  type GraphCapture,
  type KernelLaunches,
  type LaunchShape,
  type RecordedStep,
  type StudyDefaults,
} from "./backend.ts";
import { CudaInstrument, type CudaTimers, type StepEvents } from "./cuda-instrument.ts";
import type { Instrument } from "./instrument.ts";
import { NativeBackend, openLibrary } from "./native.ts";

/** cuda_api.h as called from TypeScript (handles and device pointers as numbers). */
interface CudaSymbols extends KernelFactsSymbol {
  cu_device_count(out: Int32Array): number;
  cu_device_info(device: number, out: Uint8Array): number;
  cu_stream_create(): number | null;
  cu_stream_destroy(stream: number): number;
  cu_set_stream(stream: number | null): number;
  cu_sync_stream(): number;
  cu_event_create(): number | null;
  cu_event_record(event: number): number;
  cu_event_synchronize(event: number): number;
  cu_event_elapsed_ms(start: number, end: number, out: Float32Array): number;
  cu_event_destroy(event: number): number;
  cu_graph_capture(plan: number, kind: number): number | null;
  cu_graph_launch(graph: number, n: number): number;
  cu_plan_launch_shapes(plan: number, out: Int32Array, max: number): number;
  cu_graph_kernel_nodes(graph: number): number;
  cu_graph_destroy(graph: number): number;
  cu_plan_run_n(plan: number, n: number): number;
  cu_measure_copy_bandwidth(bytes: number, iters: number, out: Float64Array): number;
  cu_measure_fp32_peak(out: Float64Array): number;
  cu_measure_launch(n: number, out: Float64Array): number;
  cu_measure_grid_barrier(n: number, out: Float64Array): number;
}

const CUDA_ERROR_UNKNOWN = 999; // cudaErrorUnknown, when a failed call left no code behind
const CUDA_ERROR_NOT_SUPPORTED = 801; // cudaErrorNotSupported: the persistent step cannot run this plan
/** cu_graph_capture's kind (CU_CAPTURE_* in cuda/cuda_api.h; test/abi-layout.test.ts compares them) */
export const CAPTURE_KINDS: Record<GraphCapture, number> = { plain: 0, programmatic: 1, persistent: 2 };
/** each capture as its launch mode's step is named in errors */
const CAPTURE_NAMES: Record<GraphCapture, string> = {
  plain: "graph",
  programmatic: "graph-pdl",
  persistent: "persistent step",
};

const unavailable = (why: string) => new UserError(`CUDA backend unavailable: ${why}`);

function libraryFor(emulated: boolean): string {
  if (emulated) return ensureBuilt("emu", { quiet: true }).path;
  const probe = probeDriver();
  if (!probe.ok) throw unavailable(probe.reason);
  if (!hasNvcc() && !hasPrebuilt("cuda")) {
    throw unavailable(
      "nvcc not found, so the kernel library cannot be built (set NVCC or CUDA_HOME), and none built from these sources is here",
    );
  }
  try {
    return ensureBuilt("cuda").path;
  } catch (e) {
    throw unavailable(
      `the kernel library did not build (${(e as Error).message.split("\n")[0]}); run \`bun run build cuda\` for the compiler's output`,
    );
  }
}

/** A pair of events on the current stream: device time between two points. */
export class EventTimer implements StepEvents {
  private readonly elapsed = new Float32Array(1);
  constructor(
    private readonly cu: CudaSymbols,
    private readonly check: (code: number, what: string) => void,
    private readonly start: number,
    private readonly end: number,
  ) {}
  begin(): void {
    this.check(this.cu.cu_event_record(this.start), "event record");
  }
  finish(): void {
    this.check(this.cu.cu_event_record(this.end), "event record");
  }
  /** waits for the end event; device milliseconds between the two */
  ms(): number {
    this.check(this.cu.cu_event_synchronize(this.end), "event synchronize");
    this.check(this.cu.cu_event_elapsed_ms(this.start, this.end, this.elapsed), "event elapsed time");
    return this.elapsed[0]!;
  }
  destroy(): void {
    this.cu.cu_event_destroy(this.start);
    this.cu.cu_event_destroy(this.end);
  }
}

/** 8, 16, …, 1024 and the seed's 10, 100, 500, 1000 */
export const GPU_STUDY: StudyDefaults = {
  contexts: [8, 10, 16, 32, 64, 100, 128, 256, 500, 512, 1000, 1024],
  longContexts: [2048, 4096, 8192, 16384, 32768],
  repeats: 50,
  warmup: 10,
  e2eTokens: 1016,
};

export class CudaBackend extends NativeBackend implements CudaTimers {
  readonly kind: "cuda" | "emu";
  readonly deviceName: string;
  readonly device: CuDeviceInfo;
  readonly graphs = true;
  readonly programmaticLaunch: boolean;
  readonly persistentStep: PersistentStepBuild;
  readonly issueIsAsync = true;
  readonly memInfoSource = "cudaMemGetInfo free bytes";
  /** the emulator runs on the host CPU: the CPU's shorter sweep */
  readonly studyDefaults: StudyDefaults;
  private readonly cu: CudaSymbols;

  readonly kernels: KernelLaunches;

  private constructor(lib: ReturnType<typeof openLibrary<CudaSymbols>>, emulated: boolean, libraryPath: string) {
    super(lib.symbols, () => lib.close());
    this.cu = lib.symbols;
    this.kind = emulated ? "emu" : "cuda";
    const code = this.sym.be_init(0);
    if (code !== 0) {
      lib.close();
      throw unavailable(`${this.sym.be_error_name(code)}: ${this.sym.be_error_string(code)}`);
    }
    const info = new Uint8Array(CU_DEVICE_INFO.bytes);
    this.check(this.cu.cu_device_info(0, info), "device query");
    this.device = decodeDeviceInfo(info);
    this.deviceName = this.device.name;
    this.programmaticLaunch = emulated || this.device.ccMajor >= 9;
    this.studyDefaults = emulated ? HOST_STUDY_DEFAULTS : GPU_STUDY;
    const facts = readKernelFacts(this.cu);
    this.kernels = { launchShapes: (plan) => this.launchShapes(plan), libraryPath, facts };
    this.persistentStep = persistentStepBuild(facts);
  }

  describe(): BackendDescription {
    const d = this.device;
    const detail: Record<string, string | number> = {
      compute_capability: `${d.ccMajor}.${d.ccMinor}`,
      sms: d.smCount,
      sm_clock_mhz: d.smClockKhz / 1000,
      memory_bytes: d.totalMemBytes,
      memory_clock_mhz: d.memClockKhz / 1000,
      bus_width_bits: d.memBusWidthBits,
      l2_bytes: d.l2Bytes,
      driver_version: d.driverVersion,
      runtime_version: d.runtimeVersion,
    };
    if (this.kind === "emu") detail.note = "the CUDA kernels' sources executed on the CPU: times are not GPU times";
    return { backend: "cuda", name: this.deviceName, detail };
  }

  instrument(): Instrument {
    return new CudaInstrument(this);
  }

  /** `path` loads a given build of the library (a test's planted-bug variant of the emulator). */
  static open(opts: { emulated?: boolean; path?: string } = {}): CudaBackend {
    const emulated = opts.emulated ?? false;
    const path = opts.path ?? libraryFor(emulated);
    return new CudaBackend(openLibrary<CudaSymbols>(path, CUDA_SYMBOLS), emulated, path);
  }

  record(plan: EncodedPlan): RecordedStep {
    const native = this.recordPlan(plan);
    const graphs = new Map<GraphCapture, number>();
    /** captured on first use: stream capture records the launches without running them */
    const captured = (capture: GraphCapture): number => {
      const known = graphs.get(capture);
      if (known) return known;
      const graph = this.cu.cu_graph_capture(native.handle, CAPTURE_KINDS[capture]);
      if (!graph) this.captureFailed(capture);
      graphs.set(capture, graph!);
      return graph!;
    };
    const replay =
      (capture: GraphCapture) =>
      (n = 1) =>
        this.check(this.cu.cu_graph_launch(captured(capture), n), `${CAPTURE_NAMES[capture]} launch`);
    return {
      ops: plan.ops.length,
      runNative: (n = 1) => this.check(this.cu.cu_plan_run_n(native.handle, n), "eager-native step"),
      runGraph: replay("plain"),
      runGraphPdl: this.programmaticLaunch ? replay("programmatic") : undefined,
      runPersistent: replay("persistent"),
      graphKernelNodes: (capture = "plain") => this.cu.cu_graph_kernel_nodes(captured(capture)),
      destroy: () => {
        for (const g of graphs.values()) this.cu.cu_graph_destroy(g);
        native.destroy();
      },
    };
  }

  private captureFailed(capture: GraphCapture): never {
    const code = this.sym.be_last_error() || CUDA_ERROR_UNKNOWN;
    if (capture === "persistent" && code === CUDA_ERROR_NOT_SUPPORTED) {
      throw new UserError(
        "the persistent step runs the fused plan's decode step, its cache in the weights' storage type: this step is not one (use another --mode, or matching --dtype and --kv-dtype)",
      );
    }
    return this.check(code, `${CAPTURE_NAMES[capture]} capture`) as never;
  }

  /**
   * The grid and block of each kernel each op of a plan launches, in order, read by capturing the plan without
   * running it: the plan's pointers may be anything (planShape's placeholders). Where some op launches more than
   * one kernel, each op is captured alone to tell whose launches are whose.
   */
  launchShapes(plan: EncodedPlan): LaunchShape[][] {
    const all = this.capturedShapes(plan);
    if (all.length === plan.ops.length) return all.map((shape) => [shape]);
    const byOp = plan.ops.map((op) => this.capturedShapes(encodePlan([op])));
    if (byOp.flat().length !== all.length)
      throw new Error(`launch shapes: ${all.length} launches for the plan, ${byOp.flat().length} op by op`);
    return byOp;
  }

  /** Every kernel launch of a plan's capture, in order. */
  private capturedShapes(plan: EncodedPlan): LaunchShape[] {
    const native = this.recordPlan(plan);
    try {
      const ints = CU_LAUNCH_SHAPE.bytes / 4;
      // the LM head launches once per group of its B ≤ MAX_BATCH rows, one row each at most; every other op once
      const most = plan.ops.length * MAX_BATCH;
      const out = new Int32Array(most * ints);
      const n = this.cu.cu_plan_launch_shapes(native.handle, out, most);
      if (n < 0) this.check(-n, "launch shapes");
      if (n > most) throw new Error(`launch shapes: ${n} launches for ${plan.ops.length} ops`);
      const { grid, block } = CU_LAUNCH_SHAPE.fields;
      return Array.from({ length: n }, (_, i) => {
        const at = (offset: number, k: number) => out[i * ints + offset / 4 + k]!;
        return { grid: [at(grid, 0), at(grid, 1), at(grid, 2)], block: [at(block, 0), at(block, 1), at(block, 2)] };
      });
    } finally {
      native.destroy();
    }
  }

  eventTimer(): EventTimer {
    const start = this.cu.cu_event_create();
    const end = this.cu.cu_event_create();
    if (!start || !end) this.check(this.sym.be_last_error() || CUDA_ERROR_UNKNOWN, "event create");
    return new EventTimer(this.cu, (code, what) => this.check(code, what), start!, end!);
  }

  /** device-to-device copy bandwidth, bytes read + written per second */
  measureCopyBandwidth(bytes: number, iters: number): number {
    const out = new Float64Array(1);
    this.check(this.cu.cu_measure_copy_bandwidth(bytes, iters, out), "bandwidth measurement");
    return out[0]!;
  }

  /** empty kernels: host µs per eager launch call, device µs per back-to-back kernel, per graph node and per graph-pdl node (null: no programmatic launch) */
  measureLaunch(n: number): { hostUs: number; eagerDeviceUs: number; graphNodeUs: number; pdlNodeUs: number | null } {
    const out = new Float64Array(4);
    this.check(this.cu.cu_measure_launch(n, out), "launch measurement");
    return {
      hostUs: out[0]!,
      eagerDeviceUs: out[1]!,
      graphNodeUs: out[2]!,
      pdlNodeUs: Number.isNaN(out[3]) ? null : out[3]!,
    };
  }

  /** the persistent step's grid barrier, n in a row: device µs per barrier (at once, skewed; and in the sequentially consistent design), the blocks that met at it */
  measureGridBarrier(n: number): GridBarrierMeasurement {
    const out = new Float64Array(5);
    this.check(this.cu.cu_measure_grid_barrier(n, out), "grid barrier measurement");
    return { us: out[0]!, blocks: out[1]!, skewedUs: out[2]!, scUs: out[3]!, scSkewedUs: out[4]! };
  }

  measureFp32Peak(): number {
    const out = new Float64Array(1);
    this.check(this.cu.cu_measure_fp32_peak(out), "fp32 peak measurement");
    return out[0]!;
  }
}
