// The profile's data model: what `bun run profile` measures, and what every report is drawn from.
// summary.json is exactly a ProfileSummary (schema: src/report/schema.ts, documented in docs/summary-schema.md).
import type { BackendDescription } from "../backends/backend.ts";
import type { LaunchFloor, Peaks, TracedStep } from "../backends/instrument.ts";
import type { ModelConfig } from "../model/architectures.ts";
import type { PeerSubject } from "../peers/peer-set.ts";
import type { PeerDispatchSplit } from "../peers/process.ts";
import type { DtypeName, OpFamily, Work } from "../ops.ts";
import type { PlanKind } from "../plan.ts";
import type { LaunchModeName } from "../run/launch-modes.ts";
import type { Stats } from "../stats.ts";
import type { FillChoice, FillMethod } from "./fill.ts";

/** What a study row measures: a launch mode of the cached step, or the uncached baseline (full recompute, eager). */
export type StudyMode = LaunchModeName | "uncached";

/** One traced step of one mode at one context. */
export interface StepTrace extends TracedStep {
  mode: StudyMode;
  context: number;
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

/**
 * A traced point's op time by family and by layer. Each op counts from the later of its start and its
 * predecessor's end (aggregate.ts opTimesMs): its duration where ops run one after another, its marginal cost
 * where they overlap (overlapping_ops > 0: graph-pdl), so that the ops sum to the busy time.
 */
export interface Breakdown {
  families: OpAggregate[];
  layers: OpAggregate[];
  /** the median step's op time (the step `split` is of; the families' shares are over every traced step) */
  op_sum_ms: number;
  /** the median step's ops that started before their predecessor ended */
  overlapping_ops: number;
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

export interface StudyPoint {
  mode: StudyMode;
  context: number;
  /** device time per token (CUDA events; on the CPU equal to host wall time) */
  device_ms: Stats;
  /** host wall time per token */
  host_ms: Stats;
  breakdown?: Breakdown;
  split?: TimeSplit;
  work: Work;
  /** achieved rates over the median device time, and as shares of the measured peaks (bytes: of read_bytes_per_s where tracked) */
  achieved: { flops_per_s: number; bytes_per_s: number; flops_share: number; bytes_share: number; regime: string };
  /** the median of the memory's read passes right before its timed steps, bytes/s (the CPU, steps past the probe's knee); else null */
  read_bytes_per_s: number | null;
  /** the median over its timed steps of the step ÷ its bytes at the pass before it (unpaired: at the peaks' rate) */
  over_floor: number;
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

/** The seed's table row: no cache against each launch mode of the cached step. */
export interface SeedRow {
  context: number;
  /** how the cache was filled to this context (profile/fill.ts) */
  fill: FillMethod;
  /** the uncached step timed; null where it was not (see uncached_model_ms) or not studied */
  uncached_ms: number | null;
  /** where the uncached step was not timed (it would take more than seconds): the work model at the measured prefill rate */
  uncached_model_ms: number | null;
  /** per launch mode measured at this context: median ms per token, and uncached / cached */
  cached: Partial<Record<LaunchModeName, { ms: number; speedup: number | null }>>;
  /** uncached FLOPs / cached FLOPs */
  flop_reduction: number;
  /** of the cached step's bytes (work model, the study's storage types), the share that is K/V cache traffic */
  kv_byte_share: number;
  /** the fastest cached mode's read_bytes_per_s (StudyPoint); null where it was not paired with read passes */
  read_bytes_per_s: number | null;
  /** the cached step's bytes (work model) at read_bytes_per_s, else at the peaks' bandwidth */
  floor_ms: number;
  /** the fastest cached mode's over_floor (StudyPoint); null where no cached mode was timed */
  over_floor: number | null;
}

export interface EndToEnd {
  mode: StudyMode;
  prompt_tokens: number;
  new_tokens: number;
  total_ms: number;
  per_token_ms: number;
  /** time to first token: the prompt's prefill (or, uncached, its first recompute) until its token is known */
  ttft_ms: number;
  /** time per output token after the first: (total − TTFT) / (new tokens − 1); null for one new token */
  tpot_ms: number | null;
}

/** Whether the run fits its backend's memory, and how far it could go (weights + cache + activations as laid out). */
export interface MemoryFit {
  free_bytes: number;
  /** what free_bytes is, in words */
  free_source: string;
  /** the most the run holds at once, at its largest context */
  need: { weights: number; cache: number; activations: number };
  /** the largest context at which this run's sessions fit */
  largest_context: number;
  /** the study's session alone: the largest context at each batch */
  largest_context_by_batch: { batch: number; context: number }[];
}

/** After a context's steps: the bytes the study's session holds in memory, allocation by allocation. */
export interface ContextMemory {
  context: number;
  /** the most positions written so far (the context's and its steps' new one, or an earlier, longer prefill) */
  kv_positions: number;
  /** kv_positions × KV bytes per token (× batch) */
  kv_bytes_formula: number;
  kv_bytes_resident: number;
  /** the weights, the cache and each region of the activations: bytes allocated and held now */
  regions: { name: string; allocated_bytes: number; resident_bytes: number }[];
}

export interface MemoryReport {
  /** the run against the memory it had, before anything was placed */
  fit: MemoryFit;
  /** what ContextMemory's resident bytes count, in words */
  resident_source: string;
  /** per context run, in the order timed */
  by_context: ContextMemory[];
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

export interface DeviceDescription extends BackendDescription {
  peaks: Peaks;
  launch: LaunchFloor;
}

/**
 * summary.json's layout version (2: per-mode results keyed by launch mode name; 3: settings.plan;
 * 4: storage types and batches — settings.dtype/kv_dtype, model.dtype, interventions; 5: predictions per storage
 * types and batch, the attribution's launch part as eager against the fastest other mode: launch.mode, mode_ms;
 * 6: the launch floor's graph-pdl node and grid barrier, the predictions' launch_parameters; 7: the grid barrier
 * with skewed arrivals and in the sequentially consistent design, op times that overlap counted by their marginal
 * cost (breakdown.overlapping_ops), the predictions per op family beside the traced kernels; 8: model.config is
 * GPT-2's or a Llama-family config — arch, n_kv_head, head_dim, intermediate_size, rms_norm_eps, rope_theta,
 * rope_scaling, tie_word_embeddings, qkv_bias, qk_norm —, and the op families rmsnorm, rope, swiglu; 9: a peer's
 * parting token; 10: how each context's cache was filled — seed_table[].fill, uncached_model_ms, settings.fill,
 * prefill_flops_per_s; 11: K/V-head variants — the interventions' and predictions' kv_heads,
 * interventions.kv_heads; the cache's share of a step's bytes, seed_table[].kv_byte_share; 12: end_to_end[].ttft_ms
 * and tpot_ms, prompt_cache; 13: memory.fit — the largest context that fits —, memory.by_context — the cache's and the
 * activations' resident bytes at each context —, memory.resident_source; 14: each timed step against the memory
 * read right before it; 15: interventions.points[].fill; 16: model.config.sliding_window, where a window holds a
 * Llama-family model's positions).
 */
export const SCHEMA_VERSION = 16;

export interface ProfileSummary {
  schema_version: typeof SCHEMA_VERSION;
  tool: { name: string; version: string };
  command: string;
  date: string;
  machine: { hostname: string; os: string; cpu: string; cpus: number; memory_bytes: number; bun: string };
  device: DeviceDescription;
  /** weight_bytes: as stored (matrices and embeddings in `dtype`, vectors in fp32) */
  model: { config: ModelConfig; source: string; parameters: number; dtype: DtypeName; weight_bytes: number };
  /** plan: which ops the cached decode step runs (src/plan.ts PlanKind); dtype, kv_dtype: how the study's model is stored */
  settings: {
    modes: StudyMode[];
    plan: PlanKind;
    contexts: number[];
    repeats: number;
    warmup: number;
    kernels: boolean;
    dtype: DtypeName;
    kv_dtype: DtypeName;
    /** profile --fill: one fill method at every context, or auto (fill.ts) */
    fill: FillChoice;
    /** the prefill rate the fills and uncached_model_ms were decided by (FLOP/s; work model over a timed real prefill) */
    prefill_flops_per_s: number;
  };
  points: StudyPoint[];
  regimes: KernelRegime[];
  seed_table: SeedRow[];
  end_to_end: EndToEnd[];
  memory: MemoryReport;
  tracing: { available: boolean; overhead_pct: number | null; dropped_records: number; note: string };
  verdicts: string[];
  /** PyTorch and llama.cpp at the same contexts on the same weights (profile --peers) */
  peers?: PeersSection;
  /** the cached step with its bytes and its batch changed (profile --dtypes, --batches) */
  interventions?: InterventionsSection;
  /** on a GPU the kernel model has parameters for: its predicted step beside each measured one */
  predictions?: PredictionsSection;
  /** time to first token cold against a kept prefix (by default where the contexts reach 1k; profile --prompt-cache) */
  prompt_cache?: PromptCacheSection;
}

// ---- prompt caching: a prefix's keys and values kept from one request for the next (prompt-cache.ts) ----

export interface PromptCachePoint {
  prefix_tokens: number;
  /** the prefix's K/V as kept in memory, and its file (header + rows) */
  bytes_kept: number;
  file_bytes: number;
  /** the whole prompt prefilled */
  cold_ttft_ms: Stats;
  /** the prefix's rows copied in from host memory, the suffix prefilled */
  warm_memory_ttft_ms: Stats;
  /** the prefix file read and checked, its rows copied in, the suffix prefilled */
  warm_file_ttft_ms: Stats;
  /** the tokens generated after a warm start (memory and file) equal those after a cold one */
  streams_identical: boolean;
}

export interface PromptCacheSection {
  suffix_tokens: number;
  new_tokens: number;
  repeats: number;
  how: string;
  points: PromptCachePoint[];
}

/** The kernel model's step time beside the measured one: PREDICTIONS, for the first GPU run to calibrate. */
export interface PredictionsSection {
  gpu: string;
  how: string;
  /** the study's cached points (its storage types, one sequence), then every intervention's step */
  points: (InterventionConfig & {
    mode: string;
    context: number;
    measured_ms: number;
    /** at the working estimates, and at the optimistic and pessimistic ends of their ranges */
    predicted_ms: number;
    optimistic_ms: number;
    pessimistic_ms: number;
    measured_over_predicted: number;
  })[];
  /** per op family at each traced point whose kernels did not overlap: the model's kernel time per step beside the traced one */
  kernels: {
    mode: string;
    context: number;
    family: string;
    calls: number;
    measured_us: number;
    predicted_us: number;
    optimistic_us: number;
    pessimistic_us: number;
    measured_over_predicted: number | null;
  }[];
  /** what the per-family rows compare, and which traced modes they leave out */
  kernels_how: string;
  /** the model's launch parameters beside what this run measured of them with empty kernels (LaunchFloor) */
  launch_parameters: {
    parameter: string;
    model_us: number;
    low_us: number;
    high_us: number;
    measured_us: number | null;
  }[];
}

// ---- interventions: bytes (storage types) and batch, the floor attributed by experiment -----------

/** How the model was stored and how many sequences one step decoded. */
export interface InterventionConfig {
  dtype: DtypeName;
  kv_dtype: DtypeName;
  batch: number;
  /** K/V heads of the model's attention (profile --kv-heads reshapes it; else the model's own) */
  kv_heads: number;
}

export interface InterventionPoint extends InterventionConfig {
  context: number;
  /** how each sequence's cache was filled to `context`: as the study's point at that context (profile/fill.ts) */
  fill: FillMethod;
  /** device time per step: one token of every sequence */
  step_ms: Stats;
  /** median step time ÷ batch */
  token_ms: number;
  /** one step's work (work model at this configuration's storage types and batch) */
  work: Work;
  bytes_per_token: number;
  /** the step's FLOPs per byte (work model) */
  intensity: number;
  /** achieved rates over the median step time, as shares of the measured peaks (bytes: of read_bytes_per_s where tracked), and the step's regime */
  achieved: { flops_per_s: number; bytes_per_s: number; flops_share: number; bytes_share: number; regime: string };
  /** as StudyPoint's: the median read pass right before its timed steps (null: unpaired), and its steps over their floors */
  read_bytes_per_s: number | null;
  over_floor: number;
}

/** What moved the cached step's time, measured: launch mode, bytes, batch. */
export interface Attribution {
  context: number;
  /** eager against the fastest other launch mode of the study's own configuration (mode_ms at eager's read rate where both were paired with read passes); change: the share of eager's step it saved (< 0: slower) */
  launch: { mode: string; eager_ms: number; mode_ms: number; change: number } | null;
  /** the study's storage type against the one that moves fewest bytes (where it is that one, the most-bytes one against it), at batch 1 */
  bytes: { from: DtypeName; to: DtypeName; bytes_ratio: number; time_ratio: number } | null;
  /** the largest batch against batch 1, the study's storage type */
  batch: { batch: number; step_ratio: number; token_ratio: number; compute_bound_from: number | null } | null;
  verdict: string;
}

export interface InterventionsSection {
  /** the launch mode every configuration ran in, and how they were timed */
  mode: string;
  method: string;
  configs: InterventionConfig[];
  points: InterventionPoint[];
  /** the machine's measured peak FLOP/s ÷ peak B/s: a step of higher intensity is compute-bound by the work model */
  balance_flop_per_byte: number;
  attribution: Attribution;
  /** with more than one K/V-head variant (profile --kv-heads): GQA's saving and the crossovers; else null */
  kv_heads: KvHeadsSection | null;
}

/** Each K/V-head variant against the one with the most heads, and where each one's cache read equals its weights'. */
export interface KvHeadsSection {
  /** the K/V-head counts timed, most first: the first is every saving's reference */
  variants: number[];
  /** every variant placed at once and interleaved (true), or one after another: together they did not fit in memory */
  timed_together: boolean;
  /**
   * at the largest context, per other variant × storage types × batch: 1 − its step ÷ the reference's (both at the
   * reference's read rate where the steps were paired with read passes: atOneReadRate), and the same of the work
   * model's bytes
   */
  savings: (InterventionConfig & {
    context: number;
    reference_kv_heads: number;
    step_ms: number;
    reference_ms: number;
    saved: number;
    formula_saved: number;
    /** saved ÷ formula_saved: 1 where the time saved follows the bytes saved */
    saved_over_formula: number | null;
  })[];
  /** per variant × storage types × batch: the context at which its K/V read equals its weights' read */
  crossovers: (InterventionConfig & {
    formula_context: number;
    within_run: boolean;
    measured_context: number | null;
  })[];
  crossover_how: string;
  verdict: string;
}

// ---- peers: PyTorch and llama.cpp on the same weights, in the same run -----------------------------

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
  /** where the peer's token first differs, how the project's own logits at that step rank it; null where all agree */
  parted: PeerParting | null;
}

/**
 * The project's logits at the step where a peer parts from it: the peer's token's rank among them (1 is the
 * largest; the project's own token is at 1, so a runner-up is 2) and how far below the project's token it falls,
 * relative to the largest |logit|. A runner-up a hair below is a near-tie another summation order may flip; a
 * token the project ranks far down means another model.
 */
export interface PeerParting {
  rank: number;
  margin: number;
}

/** One way a peer runs the decode step, as a subject of the study: the subject and what it measured. */
export interface PeerResult extends PeerSubject {
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
