// The profile's data model: what `bun run profile` measures, and what every report is drawn from.
// summary.json is exactly a ProfileSummary (schema: src/report/schema.ts, documented in the README).
import type { GPT2Config } from "../model/config.ts";

/** How a cached decode step is launched. */
export type LaunchMode = "eager" | "eager-native" | "graph";
/** What a study row measures: a launch mode of the cached step, or the uncached baseline (full recompute, eager). */
export type StudyMode = LaunchMode | "uncached";

/** The op families of the decode plan (cuda/ops.h); each maps to one kernel launch. */
export type OpFamily =
  | "embed" | "layernorm" | "linear" | "kv_append" | "attention" | "gelu" | "residual" | "lm_head" | "argmax";

/** Summary statistics of repeated samples, in milliseconds. */
export interface Stats {
  n: number;
  median: number;
  mean: number;
  p10: number;
  p90: number;
  min: number;
  max: number;
  stddev: number;
  /** (p90 - p10) / median */
  spread: number;
}

/** One timed interval of one op (a kernel on the GPU, a native op on the CPU), relative to the run's start. */
export interface OpInterval {
  /** index of the op in the step's plan */
  index: number;
  family: OpFamily;
  /** transformer block, or null for embed / ln_f / lm_head / argmax */
  layer: number | null;
  /** the plan's label, e.g. "h3.mlp.c_fc" */
  label: string;
  /** kernel name (GPU) or native function (CPU) */
  name: string;
  start_us: number;
  end_us: number;
  /** launch shape and resources, when known (GPU) */
  grid?: [number, number, number];
  block?: [number, number, number];
  registers?: number;
  shared_bytes?: number;
  correlation?: number;
}

/** A host-side interval: the issue of a step or of one launch (API call), relative to the run's start. */
export interface HostInterval {
  /** "step": issuing the whole step (TypeScript + FFI + launch API); "launch": one launch API call inside it */
  kind: "step" | "launch";
  name: string;
  start_us: number;
  end_us: number;
  correlation?: number;
}

/** One traced step: what the host did and what the device ran. */
export interface StepTrace {
  mode: StudyMode;
  context: number;
  host: HostInterval[];
  ops: OpInterval[];
}

/** Per-op-family (or per-layer) aggregate over the timed steps, Nsight's cuda_gpu_kern_sum shape. */
export interface OpAggregate {
  key: string;
  calls: number;
  total_ms: number;
  mean_ms: number;
  median_ms: number;
  min_ms: number;
  max_ms: number;
  stddev_ms: number;
  /** share of the summed op time, 0..1 */
  share: number;
}

/** Where one step's time goes. */
export interface TimeSplit {
  step_ms: number;
  /** host time to issue the step (TypeScript + FFI + launch API) */
  host_issue_ms: number;
  /** of which inside the launch API (GPU: CUPTI runtime records; CPU: 0) */
  launch_api_ms: number;
  /** union of op intervals */
  busy_ms: number;
  /** step - busy */
  idle_ms: number;
  verdict: string;
}

/** Work model of one op or one step, from the shapes. */
export interface Work {
  flops: number;
  /** fewest bytes moved through memory: each input read once, each output written once */
  bytes: number;
  /** of bytes: parameters read (weights, biases, the embedding rows used) */
  weight_bytes: number;
  /** of bytes: KV cache rows read or written */
  kv_bytes: number;
}

export interface OpWork extends Work {
  family: OpFamily;
  label: string;
  layer: number | null;
}

export interface StudyPoint {
  mode: StudyMode;
  context: number;
  /** device time per token (CUDA events; on the CPU equal to host wall time) */
  device_ms: Stats;
  /** host wall time per token */
  host_ms: Stats;
  breakdown?: { families: OpAggregate[]; layers: OpAggregate[]; op_sum_ms: number };
  split?: TimeSplit;
  work: Work;
  /** achieved rates over the median device time, and as shares of the measured peaks */
  achieved: { flops_per_s: number; bytes_per_s: number; flops_share: number; bytes_share: number; regime: string };
}

export interface KernelRegime {
  family: OpFamily;
  mode: StudyMode;
  context: number;
  /** time per call: the family's median time per step over its calls per step */
  median_us: number;
  /** the family's work per step over its median time per step */
  flops_per_s: number;
  bytes_per_s: number;
  /** launch-bound, memory-bound or compute-bound */
  regime: "launch-bound" | "memory-bound" | "compute-bound";
}

export interface SeedRow {
  context: number;
  uncached_ms: number | null;
  eager_ms: number | null;
  graph_ms: number | null;
  /** the cached step issued natively in one call (the CPU's replay) */
  native_ms: number | null;
  /** uncached / eager and uncached / graph */
  speedup_eager: number | null;
  speedup_graph: number | null;
  /** uncached FLOPs / cached FLOPs */
  flop_reduction: number;
}

export interface EndToEnd {
  mode: StudyMode;
  prompt_tokens: number;
  new_tokens: number;
  total_ms: number;
  per_token_ms: number;
}

export interface MemoryReport {
  weight_bytes: number;
  kv_bytes_per_token_formula: number;
  kv_bytes_per_token_measured: number;
  kv_cache_tokens: number;
  kv_cache_bytes_formula: number;
  kv_cache_bytes_measured: number;
  /** other allocations found beside weights and cache (activations, scratch, library workspaces) */
  workspace_bytes: number;
  how_measured: string;
  /** batch × context at which the cache outgrows the weights */
  crossover: { batch: number; context: number }[];
}

/** What dispatching one op costs with no work in it: the floor a step of many small ops stands on. */
export interface LaunchFloor {
  /** host µs per launch call (GPU: an empty kernel from C++; CPU: an empty op through bun:ffi) */
  host_us: number;
  /** GPU µs per empty kernel launched back to back: the launch rate the device sustains */
  device_us: number | null;
  /** GPU µs per empty kernel node in a graph replay */
  graph_node_us: number | null;
  how_measured: string;
}

export interface DeviceDescription {
  backend: "cpu" | "cuda";
  name: string;
  detail: Record<string, string | number>;
  peaks: { bytes_per_s: number; flops_per_s: number; how_measured: string };
  launch: LaunchFloor;
}

export interface ProfileSummary {
  schema_version: 1;
  tool: { name: string; version: string };
  command: string;
  date: string;
  machine: { hostname: string; os: string; cpu: string; cpus: number; memory_bytes: number; bun: string };
  device: DeviceDescription;
  model: { config: GPT2Config; source: string; parameters: number; weight_bytes: number };
  settings: { modes: StudyMode[]; contexts: number[]; repeats: number; warmup: number; kernels: boolean };
  points: StudyPoint[];
  regimes: KernelRegime[];
  seed_table: SeedRow[];
  end_to_end: EndToEnd[];
  memory: MemoryReport;
  tracing: { available: boolean; overhead_pct: number | null; dropped_records: number; note: string };
  verdicts: string[];
  /** PyTorch and llama.cpp at the same contexts on the same weights (profile --peers) */
  peers?: PeersSection;
}

// ---- peers: PyTorch and llama.cpp on the same weights, in the same run -----------------------------

/** Where one traced step of a peer goes (PyTorch's seed-style step under torch.profiler). */
export interface PeerDispatchSplit {
  context: number;
  /** what ops_per_step counts: "torch calls" (Python → dispatcher) on the CPU, "kernel launches" on the GPU */
  unit: string;
  ops_per_step: number;
  /** calls into torch Python makes per step (functions and tensor methods) */
  torch_calls: number;
  step_ms: number;
  /** host time issuing the step: on the CPU the time between ops (interpreter, bindings), on the GPU the whole issue */
  host_issue_ms: number;
  /** of which inside launch calls (GPU) */
  launch_api_ms: number;
  /** union of the ops (CPU) or kernels (GPU) */
  busy_ms: number;
  idle_ms: number;
}

/** A peer's time per token at one context, against the project's fastest mode and the memory floor. */
export interface PeerPoint {
  context: number;
  ms: Stats;
  /** the project's fastest cached mode at this context (by untraced median) and its time */
  best_mode: string | null;
  best_mode_ms: number | null;
  /** ms.median / best_mode_ms: above 1 the peer takes longer than the project */
  ratio_to_best_mode: number | null;
  /** the cached step's bytes (work model) at the measured read bandwidth */
  floor_ms: number | null;
  ratio_to_floor: number | null;
}

/** A peer's greedy tokens against the project's: tokens that agree before the first difference. */
export interface PeerAgreement {
  matched: number;
  of: number;
  agrees: boolean;
  tokens: number[];
}

/** One way a peer runs the decode step, as a subject of the study. */
export interface PeerResult {
  /** "torch:seed", "llama.cpp:fa-on" */
  id: string;
  peer: string;
  variant: string;
  /** "PyTorch seed-style" */
  short: string;
  label: string;
  version: string;
  device: string;
  settings: Record<string, string | number | boolean>;
  points: PeerPoint[];
  /** null when the peer could not generate */
  agreement: PeerAgreement | null;
}

export interface PeersSection {
  /** how the peers were timed beside the project's modes */
  method: string;
  prompt_ids: number[];
  /** the project's greedy tokens for the prompt: what every peer is checked against */
  reference_tokens: number[];
  results: PeerResult[];
  /** PyTorch's seed-style step traced once per context */
  torch_dispatch: PeerDispatchSplit[];
  /** peers and variants that did not run, each with its reason */
  skipped: { name: string; reason: string }[];
}
