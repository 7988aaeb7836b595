// The decode-floor study: for every context and launch mode, fill the KV cache to that context (by a real
// prefill, or synthetically past what prefills in seconds: fill.ts), then time decode steps there (and the
// uncached baseline's full recompute where it finishes in seconds), trace the ops of a few of them, generate
// end to end, and measure the cache's memory.
import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import type { Instrument, PairedStep, TimedStep } from "../backends/instrument.ts";
import { kvBytesPerToken, type ModelConfig } from "../model/architectures.ts";
import type { ModelWeights } from "../model/architectures.ts";
import { TRACKER_MEMORY_SHARE } from "../backends/read-probe.ts";
import { DTYPE_BYTES } from "../ops.ts";
import type { PeerSet } from "../peers/peer-set.ts";
import type { PeerDispatchSplit } from "../peers/process.ts";
import type { PlanOp, StepForm } from "../plan.ts";
import { generate } from "../run/generate.ts";
import { launchMode, type LaunchMode } from "../run/launch-modes.ts";
import {
  availableMemory,
  largestContextByBatch,
  largestFittingContext,
  MEASURED_CACHE_TOKENS,
  memoryBytes,
  groupsFitTogether,
  narrowerWeights,
  needParts,
  runNeed,
  type RunPlacement,
} from "../run/memory-fit.ts";
import { cacheBytes, placementTotal } from "../run/model-buffers.ts";
import { Session } from "../run/session.ts";
import { summarize, type Stats } from "../stats.ts";
import { CALIBRATION_TOKENS, fillCache, pointFill, PrefillRate, type FillChoice, type PointFill } from "./fill.ts";
import {
  measureInterventions,
  placedForms,
  TOGETHER_MEMORY_SHARE,
  type InterventionsResult,
  type KvVariant,
} from "./interventions.ts";
import { partingOf, tokensBeforeParting, type PeerMeasurements } from "./peers-summary.ts";
import { promptOf } from "./prompts.ts";
import {
  AUTO_PREFIXES_RULE,
  autoPrefixes,
  measurePromptCache,
  noAutoPrefixReason,
  promptCacheContext,
} from "./prompt-cache.ts";
import type {
  ContextMemory,
  EndToEnd,
  MemoryFit,
  MemoryReport,
  PeerParting,
  PromptCacheSection,
  StepTrace,
  StudyMode,
} from "./types.ts";
import { cachedStepWork, sumWork, uncachedStepWork } from "./work-model.ts";

export interface StudyOptions {
  modes: StudyMode[];
  /** the study's cached decode step: its plan and storage types (one sequence) */
  form: StepForm;
  /** the cached step again with other storage types, batches and K/V-head counts, in one launch mode (profile --dtypes, --batches, --kv-heads) */
  interventions?: { forms: StepForm[]; variants: KvVariant[]; mode: LaunchMode };
  contexts: number[];
  /** how each context's cache is filled (fill.ts) */
  fill: FillChoice;
  repeats: number;
  warmup: number;
  /** trace ops (CUPTI / native timers) */
  kernels: boolean;
  /** traced steps per (mode, context) */
  tracedSteps: number;
  e2e: { promptTokens: number; newTokens: number };
  /** prefix lengths whose time to first token is timed cold and warm (profile --prompt-cache), or "auto": the run
   * chooses them by its prefill rate (autoPrefixes) */
  promptCache?: number[] | "auto";
  seed: number;
  onProgress?: (done: number, total: number, what: string) => void;
  /** a line for the user outside the progress bar */
  say?: (line: string) => void;
  /** a safe point between steps: the CLI yields to the event loop there and stops on a signal */
  checkpoint?: () => Promise<void>;
}

export interface Measured {
  mode: StudyMode;
  context: number;
  device_ms: Stats;
  host_ms: Stats;
  issue_ms: Stats;
  /** every timed step's device ms with the memory's read pass right before it */
  paired: PairedStep[];
  /** traced / untraced host wall time per step − 1, the two measured back to back in the tracing pass */
  tracing_overhead: number | null;
}

export interface StudyResult {
  measured: Measured[];
  traces: StepTrace[];
  dropped: number;
  /** traced steps left out because their records did not line up one-to-one with the plan */
  mismatched: number;
  endToEnd: EndToEnd[];
  promptCache?: PromptCacheSection;
  memory: MemoryReport;
  /** the peers' measurements, when the study ran with peers */
  peers?: PeerMeasurements & { prompt: number[]; reference: number[] };
  interventions?: InterventionsResult;
  /** per context: how its cache was filled, and whether its uncached baseline was timed */
  fills: PointFill[];
  /** the prefill rate the fills were decided by (FLOP/s, work model over the longest real prefill timed) */
  prefillFlopsPerS: number;
  /** the model as the study placed it: n_positions is the positions its caches hold, which size its launches */
  placed: ModelConfig;
}

/** Tokens of the greedy agreement check between the project and its peers, from an 8-token prompt. */
export const AGREEMENT_TOKENS = 20;
export const AGREEMENT_PROMPT = 8;
/** The prompt the memory measurement prefills before its warm-up step. */
const MEMORY_PROMPT = 8;

const nowMs = () => Bun.nanoseconds() / 1e6;

/**
 * Units of progress in a study: every (context, mode) point timed, one end-to-end run per mode, every prompt-cache
 * prefix given (those the run chooses count none), every intervention configuration at every context, then every
 * point traced.
 */
export function studyUnits(
  opts: Pick<StudyOptions, "contexts" | "modes" | "kernels" | "interventions" | "promptCache">,
): number {
  const interventions = opts.contexts.length * interventionConfigs(opts);
  const traced = opts.kernels ? opts.modes.filter(tracedByOp).length : 0;
  const promptCache = opts.promptCache === "auto" ? 0 : (opts.promptCache?.length ?? 0);
  return opts.contexts.length * (opts.modes.length + traced) + opts.modes.length + promptCache + interventions;
}

/** Configurations the interventions time: every form of every K/V-head variant. */
const interventionConfigs = (opts: Pick<StudyOptions, "interventions">) =>
  (opts.interventions?.forms.length ?? 0) * (opts.interventions?.variants.length ?? 0);

/**
 * The most bytes one cached step of the study reads (work model): its largest context, in whichever of its
 * configurations moves the most. The CPU's read probe reads at least this much (src/backends/read-probe.ts).
 */
export function largestStepBytes(
  config: ModelConfig,
  opts: Pick<StudyOptions, "contexts" | "form" | "interventions">,
): number {
  const context = Math.max(...opts.contexts);
  const forms = [opts.form, ...(opts.interventions?.forms ?? [])];
  const configs = [config, ...(opts.interventions?.variants ?? []).map((v) => v.weights.config)];
  return Math.max(...configs.flatMap((cfg) => forms.map((form) => sumWork(cachedStepWork(cfg, context, form)).bytes)));
}

/**
 * The most positions a study's sequences reach: its largest context's step writes position c; the prompt-cache
 * prompts; the end-to-end run; the peers' agreement check.
 */
export const studiedContext = (opts: Pick<StudyOptions, "contexts" | "e2e" | "promptCache">) =>
  Math.max(
    ...opts.contexts.map((c) => c + 1),
    ...(opts.promptCache === "auto" ? [] : (opts.promptCache ?? [])).map(promptCacheContext),
    opts.e2e.promptTokens + opts.e2e.newTokens,
    AGREEMENT_PROMPT + AGREEMENT_TOKENS,
    MEMORY_PROMPT + 1,
  );

/** Whether a mode's steps are traced op by op: the uncached step and every mode that launches a kernel per op. */
export const tracedByOp = (mode: StudyMode) => mode === "uncached" || launchMode(mode).kernelPerOp;

/** The sessions a study places: its own for the whole run, then each K/V-head variant's forms beside it. */
export function runPlacementOf(
  weights: ModelWeights,
  opts: Pick<StudyOptions, "form" | "interventions">,
): RunPlacement {
  const study = { config: weights.config, form: opts.form };
  const iv = opts.interventions;
  const groups = (iv?.variants ?? []).map((v) =>
    placedForms(v.weights, iv!.forms, { weights, form: opts.form }).map((p) => ({ config: v.weights.config, ...p })),
  );
  return { study, groups };
}

/**
 * Whether the K/V-head variants' sessions are placed at once beside the study's: where together they take at most
 * TOGETHER_MEMORY_SHARE of what `usable` leaves beside it (the memory fit and the interventions both ask this).
 */
export function variantsTogether(
  backend: Backend,
  weights: ModelWeights,
  opts: Pick<StudyOptions, "form" | "interventions" | "contexts" | "e2e" | "promptCache">,
  usable: number,
): boolean {
  const run = runPlacementOf(weights, opts);
  return groupsFitTogether(backend, run, studiedContext(opts), usable, TOGETHER_MEMORY_SHARE);
}

/** The largest context the study's sessions fit in the memory its backend has now. */
export function largestStudyContext(
  backend: Backend,
  weights: ModelWeights,
  opts: Pick<StudyOptions, "form" | "interventions" | "contexts" | "e2e" | "promptCache">,
): number {
  return largestFittingContext(backend, runPlacementOf(weights, opts), studyMemory(backend).bytes);
}

/**
 * The memory the study's sessions may take ("usable" in its lines): what the backend has free, on the CPU less the
 * share the read passes' buffer may hold beside every session for the whole study (read-probe.ts ReadTracker).
 */
function studyMemory(backend: Backend): { bytes: number; source: string } {
  const free = availableMemory(backend);
  if (backend.kind !== "cpu") return free;
  return {
    bytes: free.bytes * (1 - TRACKER_MEMORY_SHARE),
    source: `${free.source} less the 1/${1 / TRACKER_MEMORY_SHARE} the read passes' buffer may take`,
  };
}

/**
 * The study against the memory its backend has now, before anything is placed: a UserError naming the largest
 * context that would fit when it does not.
 */
export function studyMemoryFit(
  backend: Backend,
  weights: ModelWeights,
  opts: Pick<StudyOptions, "form" | "interventions" | "contexts" | "e2e" | "promptCache">,
): MemoryFit {
  const run = runPlacementOf(weights, opts);
  const free = studyMemory(backend);
  // what the run holds: its variants at once where they fit so; the largest context, one variant at a time
  const placed = { ...run, together: variantsTogether(backend, weights, opts, free.bytes) };
  const need = runNeed(backend, placed, studiedContext(opts));
  const largest = largestFittingContext(backend, run, free.bytes);
  const fit: MemoryFit = {
    free_bytes: free.bytes,
    free_source: free.source,
    need,
    largest_context: largest,
    largest_context_by_batch: largestContextByBatch(backend, run.study, free.bytes),
  };
  if (placementTotal(need) > free.bytes) {
    const batch = Math.max(opts.form.batch, ...(opts.interventions?.forms ?? []).map((f) => f.batch));
    throw new UserError(
      `memory: this run at context ${Math.max(...opts.contexts)} × batch ${batch} needs ${memoryBytes(placementTotal(need))} at once ` +
        `(${needParts(need)}) and the ${backend.kind === "cuda" ? "GPU" : "machine"} has ${memoryBytes(free.bytes)} usable: ` +
        (largest > 0
          ? `the largest context that fits is ${largest} (--contexts ≤ ${largest})`
          : `not even one position fits; ${narrowerWeights(
              [opts.form.weights, ...(opts.interventions?.forms ?? []).map((f) => f.weights)],
              "--dtypes bf16, without f32",
            )}`),
    );
  }
  return fit;
}

/** The fit in one line: what the run holds at once against what is free, and the largest context each batch fits. */
export function fitLine(fit: MemoryFit, positions: number): string {
  const byBatch = fit.largest_context_by_batch.map((b) => `${b.context} at batch ${b.batch}`).join(", ");
  return (
    `memory: ${memoryBytes(placementTotal(fit.need))} at once (${needParts(fit.need)}) of ${memoryBytes(fit.free_bytes)} usable, its sequences holding up to ${positions} positions; ` +
    `this run fits up to context ${fit.largest_context}; the model alone up to ${byBatch}`
  );
}

export class Study {
  readonly session: Session<ModelWeights>;
  private readonly memoryBefore: number;
  private readonly byContext: ContextMemory[] = [];
  /** the most positions of the cache written so far (pages once written stay resident) */
  private positionsWritten = 0;
  private readonly rate: PrefillRate;
  private readonly fills = new Map<number, PointFill>();

  constructor(
    readonly backend: Backend,
    readonly instrument: Instrument,
    readonly weights: ModelWeights,
    readonly opts: StudyOptions,
    private readonly fit: MemoryFit,
  ) {
    this.memoryBefore = backend.memInfo().free;
    this.session = new Session(backend, weights, { form: opts.form, maxContext: studiedContext(opts) });
    this.rate = new PrefillRate(this.session.config, opts.form);
  }

  /** The prompt cache at the prefixes given, or at those the run chooses now that its prefill rate is measured. */
  private async promptCacheSection(
    progress: (what: string, units: number) => void,
  ): Promise<PromptCacheSection | undefined> {
    const given = this.opts.promptCache;
    if (given === undefined) return undefined;
    // the positions of the study's largest context (a GPT-2 session holds its model's whatever the contexts)
    const positions = Math.min(this.session.config.n_positions, Math.max(...this.opts.contexts) + 1);
    const seconds = (tokens: number) => this.rate.seconds(tokens);
    const prefixes = given === "auto" ? autoPrefixes(positions, seconds) : given;
    if (given === "auto")
      this.opts.say?.(
        prefixes.length > 0
          ? `prompt cache: prefix lengths ${prefixes.join(", ")}, chosen as ${AUTO_PREFIXES_RULE} (--prompt-cache P,… to choose others, off for none)`
          : `prompt cache: not timed: ${noAutoPrefixReason(positions, seconds)} (--prompt-cache P,… to choose prefixes)`,
      );
    if (prefixes.length === 0) return undefined;
    return measurePromptCache(this.session, prefixes, {
      seed: this.opts.seed,
      // the units counted before the run are the prefixes given; chosen ones add none
      onPrefix: (P) => progress(`prompt cache: a ${P}-token prefix, cold and warm`, given === "auto" ? 0 : 1),
      checkpoint: () => this.checkpoint(),
      ...(given === "auto"
        ? { chosen: `prefix lengths chosen by the run (no --prompt-cache): ${AUTO_PREFIXES_RULE}` }
        : {}),
    });
  }

  /**
   * Everything that is timed comes before tracing is first switched on (CUPTI attached to the driver can slow
   * launches, and stays attached): every point (the peers, if any, beside the modes), then the end-to-end runs,
   * the prompt cache and the interventions; then every point is traced, its cache filled again, and the peers are checked token
   * for token.
   */
  async run(peers?: PeerSet): Promise<StudyResult> {
    const memory = this.measureMemory();
    this.prefill(Math.min(CALIBRATION_TOKENS, this.session.config.n_positions - 1)); // the rate's first estimate
    const total = studyUnits(this.opts);
    let done = 0;
    const progress = (what: string, units = 1) => {
      this.opts.onProgress?.(done, total, what);
      done += units;
    };
    const modes = this.orderedModes();
    const points = this.opts.contexts.flatMap((context) => modes.map((mode) => ({ mode, context })));
    const peerSamples = new Map<string, Map<number, number[]>>();
    const peerTraces: PeerDispatchSplit[] = [];
    const measured: Measured[] = [];
    for (const context of this.opts.contexts) {
      const fill = pointFill(context, this.opts.fill, this.rate, modes.includes("uncached"));
      this.fills.set(context, fill);
      const withPeers = fill.fill === "prefill" && peers?.subjects.length;
      progress(
        `timing context ${context} (${fill.fill} fill${this.opts.fill === "synthetic" && fill.fill === "prefill" ? ": no longer than a synthetic fill's real prefill" : ""}): ${this.modesAt(context).join(", ")}` +
          `${withPeers ? ` and ${peers!.subjects.length} peer subjects` : ""}` +
          `${fill.uncached_timed ? "" : "; uncached from the work model"}`,
        modes.length,
      );
      measured.push(...(await this.timeContext(context, peers, peerSamples)));
      this.wrote(context + 1);
      this.byContext.push(this.memoryAt(context));
      const trace = this.opts.kernels && peers && fill.fill === "prefill" ? await peers.traceTorch() : null;
      if (trace) peerTraces.push(trace);
    }
    const endToEnd: EndToEnd[] = [];
    for (const mode of this.opts.modes) {
      progress(`end to end, ${mode}`);
      await this.checkpoint();
      endToEnd.push(this.endToEnd(mode));
    }
    const promptCache = await this.promptCacheSection(progress);
    const interventions = this.opts.interventions;
    const samples =
      interventions &&
      (await measureInterventions(
        this.backend,
        this.instrument,
        interventions.variants,
        interventions.forms,
        interventions.mode,
        this.session,
        {
          ...this.opts,
          checkpoint: () => this.checkpoint(),
          onContext: (context, configurations, fill) =>
            progress(
              `interventions at context ${context} (${fill === "synthetic" ? "filled synthetically" : "prefilled"}): ${configurations} configurations`,
              configurations,
            ),
          fillOf: (context) => this.fills.get(context)!.fill,
          ...(this.opts.say ? { say: this.opts.say } : {}),
          together: variantsTogether(this.backend, this.weights, this.opts, this.fit.free_bytes),
        },
      ));
    const traces: StepTrace[] = [];
    let dropped = 0;
    let mismatched = 0;
    if (this.opts.kernels && this.instrument.canTrace) {
      for (const { mode, context } of points) {
        if (!tracedByOp(mode) || !this.modesAt(context).includes(mode)) continue;
        progress(`tracing ${mode} @ ${context}`);
        await this.checkpoint();
        const t = await this.tracePoint(mode, context);
        // a step whose records do not line up one-to-one with the plan would mislabel every op after the gap
        traces.push(
          ...t.steps.filter((_, k) => !t.mismatchedSteps.includes(k)).map((step) => ({ mode, context, ...step })),
        );
        dropped += t.dropped;
        mismatched += t.mismatchedSteps.length;
        measured.find((m) => m.mode === mode && m.context === context)!.tracing_overhead = t.overhead;
      }
    }
    const peerResult = peers ? await this.checkPeers(peers, peerSamples, peerTraces) : undefined;
    this.opts.onProgress?.(total, total, "done");
    return {
      measured,
      traces,
      dropped,
      mismatched,
      endToEnd,
      ...(promptCache ? { promptCache } : {}),
      memory: { ...memory, by_context: this.byContext },
      ...(peerResult ? { peers: peerResult } : {}),
      ...(samples ? { interventions: samples } : {}),
      fills: this.opts.contexts.map((c) => this.fills.get(c)!),
      prefillFlopsPerS: this.rate.measured,
      placed: this.session.config,
    };
  }

  /** cached launch modes first, then the uncached baseline */
  private orderedModes(): StudyMode[] {
    return [...this.opts.modes.filter((m) => m !== "uncached"), ...this.opts.modes.filter((m) => m === "uncached")];
  }

  /** The modes timed at `context`: the uncached baseline only where its fill decision times it. */
  private modesAt(context: number): StudyMode[] {
    const timed = this.fills.get(context)?.uncached_timed ?? true;
    return this.orderedModes().filter((m) => m !== "uncached" || timed);
  }

  /** A real prefill of `tokens` tokens of the study's prompt, timed for the prefill rate. */
  private prefill(tokens: number): void {
    const s = this.session;
    s.backend.synchronize();
    const t0 = nowMs();
    s.prefill(promptOf(tokens, s.config.vocab_size, this.opts.seed));
    s.backend.synchronize();
    this.rate.observe(tokens, nowMs() - t0);
    this.wrote(tokens);
  }

  private wrote(positions: number): void {
    this.positionsWritten = Math.max(this.positionsWritten, positions);
  }

  /** The cache holds `context` tokens of the study's prompt, filled as the point's decision says. */
  private fillTo(context: number): void {
    if (this.fills.get(context)!.fill === "prefill") {
      this.prefill(context);
      return;
    }
    fillCache(this.session, "synthetic", context, this.opts.seed);
    this.session.backend.synchronize();
  }

  /**
   * How a step in `mode` at `context` is issued, and what must be reset before each so the context stays put
   * (the cache filled to `context` first: fillTo).
   */
  private stepAt(
    mode: StudyMode,
    context: number,
  ): { run: () => void; before: () => void; ops: PlanOp[]; bytes: number; check: { T: number; reset: () => void } } {
    const s = this.session;
    if (mode === "uncached") {
      // the whole sequence of context + 1 tokens recomputed from position 0, in passes
      const { steps, last } = s.passes(context + 1);
      return {
        run: () => {
          for (const step of steps) step.runEager();
        },
        before: () => s.setPosition(0),
        ops: steps.flatMap((step) => step.ops),
        bytes: sumWork(uncachedStepWork(s.config, context, this.opts.form)).bytes,
        check: { T: last.T, reset: () => s.setPosition(last.pos) },
      };
    }
    const step = s.step(1);
    const launch = launchMode(mode);
    const before = () => s.setPosition(context);
    return {
      run: () => launch.run(step, 1),
      before,
      ops: step.ops,
      bytes: sumWork(cachedStepWork(s.config, context, this.opts.form)).bytes,
      check: { T: 1, reset: before },
    };
  }

  private checkpoint(): Promise<void> {
    return this.opts.checkpoint?.() ?? Promise.resolve();
  }

  /**
   * Every mode at one context, interleaved step by step with the peers' subjects: warm-up steps for each,
   * then `repeats` rounds of one step per mode and per subject (A B C A B C …), so that drift on a shared
   * machine hits all of them alike. The cache holds `context` tokens of the same prompt for every mode. With
   * peers, each timed step follows an untimed one of the same subject: a peer's threads keep spinning after its
   * step (llama.cpp's, PyTorch's OpenMP) and slowed whichever subject came next — eager by 30% at context 512
   * in one run, the rest of the study's verdicts following it — while ours slept and woke late on a busy vCPU.
   * Each of our timed steps comes right after a pass of the memory read (Instrument.readPass), its floor's rate.
   */
  private async timeContext(
    context: number,
    peers: PeerSet | undefined,
    peerSamples: Map<string, Map<number, number[]>>,
  ): Promise<Measured[]> {
    const { repeats, warmup } = this.opts;
    const modes = this.modesAt(context);
    this.fillTo(context);
    const steps = modes.map((mode) => this.stepAt(mode, context));
    const settle = peers !== undefined; // fixed for the whole run, even if a peer drops out or sits a point out
    if (this.fills.get(context)!.fill !== "prefill") peers = undefined; // the peers fill their caches by prefill
    // a safe point between steps, outside the timed region
    const timeOne = async (i: number): Promise<TimedStep> => {
      const { run, before } = steps[i]!;
      await this.checkpoint();
      before();
      this.backend.synchronize();
      return this.instrument.time(run);
    };
    await peers?.fill(context);
    const subjects = [...(peers?.subjects ?? [])];
    for (let i = 0; i < modes.length; i++) for (let w = 0; w < warmup; w++) await timeOne(i);
    for (const s of subjects) await peers!.time(s, 0, warmup);
    const samples = modes.map((): TimedStep[] => []);
    const reads = modes.map((): (number | null)[] => []);
    const peerMs = new Map(subjects.map((s) => [s.id, [] as number[]]));
    for (let r = 0; r < repeats; r++) {
      for (let i = 0; i < modes.length; i++) {
        if (settle) await timeOne(i);
        reads[i]!.push(this.instrument.readPass(steps[i]!.bytes));
        samples[i]!.push(await timeOne(i));
        // the logits this mode's last step left: every mode shares the buffer, so each is checked in its turn
        if (r === repeats - 1)
          this.session.checkLogits(
            `of the ${modes[i]} step at context ${context}`,
            steps[i]!.check.T,
            steps[i]!.check.reset,
          );
      }
      for (const s of subjects) peerMs.get(s.id)!.push(...((await peers!.time(s, 1, 1)) ?? []));
    }
    for (const [id, ms] of peerMs) {
      if (!ms.length) continue;
      if (!peerSamples.has(id)) peerSamples.set(id, new Map());
      peerSamples.get(id)!.set(context, ms);
    }
    return modes.map((mode, i) => ({
      mode,
      context,
      device_ms: summarize(samples[i]!.map((x) => x.deviceMs)),
      host_ms: summarize(samples[i]!.map((x) => x.hostMs)),
      issue_ms: summarize(samples[i]!.map((x) => x.issueMs)),
      paired: samples[i]!.map((x, k) => ({ ms: x.deviceMs, read: reads[i]![k] ?? null })),
      tracing_overhead: null,
    }));
  }

  /** The project's greedy tokens for the agreement prompt, and every peer subject's. */
  private async checkPeers(
    peers: PeerSet,
    samples: Map<string, Map<number, number[]>>,
    traces: PeerDispatchSplit[],
  ): Promise<NonNullable<StudyResult["peers"]>> {
    const prompt = promptOf(AGREEMENT_PROMPT, this.session.config.vocab_size, this.opts.seed);
    const reference = generate(this.session, {
      prompt,
      maxNewTokens: AGREEMENT_TOKENS,
      cache: true,
      mode: launchMode("eager"),
    }).generatedIds;
    const generated = await peers.generate(prompt, AGREEMENT_TOKENS);
    return {
      subjects: [...peers.subjects],
      samples,
      traces,
      generated,
      partings: this.partings(prompt, reference, generated),
      skipped: [...peers.skipped],
      prompt,
      reference,
    };
  }

  /**
   * For each subject whose tokens part from the project's, the project's logits at that step (one uncached pass over
   * the prompt and its tokens, taken only when some subject parts) set against the subject's token.
   */
  private partings(
    prompt: readonly number[],
    reference: readonly number[],
    generated: ReadonlyMap<string, readonly number[]>,
  ): Map<string, PeerParting> {
    const V = this.session.config.vocab_size;
    const partings = new Map<string, PeerParting>();
    let logits: Float32Array | null = null;
    for (const [id, tokens] of generated) {
      const k = tokensBeforeParting(tokens, reference);
      if (k === reference.length || tokens[k] === undefined) continue;
      logits ??= this.session.logitsAtEveryPosition([...prompt, ...reference.slice(0, -1)]);
      const at = prompt.length - 1 + k; // the position whose logits chose reference[k]
      partings.set(id, partingOf(logits.subarray(at * V, (at + 1) * V), reference[k]!, tokens[k]!));
    }
    return partings;
  }

  private async tracePoint(mode: StudyMode, context: number) {
    this.fillTo(context);
    const { run, before, ops } = this.stepAt(mode, context);
    for (let i = 0; i < this.opts.warmup; i++) {
      await this.checkpoint();
      before();
      run();
    }
    // untraced steps right before the traced ones: the overhead compares like with like, minutes of drift apart no more
    const untraced = Array.from({ length: this.opts.tracedSteps }, () => {
      before();
      this.backend.synchronize();
      return this.instrument.time(run).hostMs;
    });
    const traced = this.instrument.trace(run, before, this.opts.tracedSteps, ops, mode);
    return { ...traced, overhead: summarize(traced.wallMs).median / summarize(untraced).median - 1 };
  }

  /** Generates newTokens from a promptTokens prompt: prefill, then back-to-back steps with no host sync between. */
  private endToEnd(mode: StudyMode): EndToEnd {
    const { promptTokens, newTokens } = this.opts.e2e;
    const s = this.session;
    const prompt = promptOf(promptTokens, s.config.vocab_size, this.opts.seed);
    s.backend.synchronize();
    const t0 = nowMs();
    // the first token is known once its step has finished: one sync, then the rest back to back
    const recompute = (rows: number) => {
      s.setPosition(0);
      for (const step of s.passes(rows).steps) step.runEager();
    };
    if (mode === "uncached") {
      s.setSequence(prompt);
      recompute(promptTokens);
    } else {
      s.prefill(prompt);
    }
    s.backend.synchronize();
    const ttft_ms = nowMs() - t0;
    if (mode === "uncached") {
      for (let i = 1; i < newTokens; i++) recompute(promptTokens + i);
    } else {
      launchMode(mode).run(s.step(1), newTokens - 1);
    }
    s.backend.synchronize();
    const total_ms = nowMs() - t0;
    // the step that left the last logits: a recompute's or the prefill's last pass, or the last decode step
    const last =
      mode === "uncached"
        ? s.passes(promptTokens + newTokens - 1).last
        : newTokens > 1
          ? { T: 1, pos: promptTokens + newTokens - 2 }
          : s.passes(promptTokens).last;
    s.checkLogits(`of the last ${mode} step end to end`, last.T, () => s.setPosition(last.pos));
    if (s.position() !== promptTokens + newTokens - 1) {
      throw new Error(`end-to-end ${mode}: the position ended at ${s.position()}, not ${promptTokens + newTokens - 1}`);
    }
    return {
      mode,
      prompt_tokens: promptTokens,
      new_tokens: newTokens,
      total_ms,
      per_token_ms: total_ms / newTokens,
      ttft_ms,
      tpot_ms: newTokens > 1 ? (total_ms - ttft_ms) / (newTokens - 1) : null,
    };
  }

  /**
   * What the session holds in memory after `context`'s steps (resident pages on the host, allocations on a GPU):
   * its cache against the formula for the positions written, and every other allocation beside it.
   */
  private memoryAt(context: number): ContextMemory {
    const s = this.session;
    const { weights, cache } = s.resident.allocations;
    const positions = this.positionsWritten;
    const region = (name: string, b: DeviceBuffer) => ({
      name,
      allocated_bytes: b.bytes,
      resident_bytes: this.backend.residentBytes(b.ptr, b.bytes),
    });
    const regions = [
      region("weights", weights),
      region("cache", cache),
      ...Object.entries(s.resident.activationRegions).map(([name, b]) => region(name, b)),
    ];
    return {
      context,
      kv_positions: positions,
      kv_bytes_formula: positions * s.batch * kvBytesPerToken(s.config, DTYPE_BYTES[s.form.kv]),
      kv_bytes_resident: regions[1]!.resident_bytes,
      regions,
    };
  }

  /**
   * KV-cache memory, measured: the session (weights, cache, activations) is resident and a warm-up step
   * has run, so library workspaces are already allocated; then a second cache of MEASURED_CACHE_TOKENS tokens
   * (fewer than a long context's: it sits beside the study's own) is allocated and the backend's free memory read
   * before and after.
   */
  private measureMemory(): Omit<MemoryReport, "by_context"> {
    const s = this.session;
    const cfg = s.config;
    const prompt = Math.min(MEMORY_PROMPT, cfg.n_positions - 1);
    s.prefill(promptOf(prompt, cfg.vocab_size, this.opts.seed));
    s.run(1);
    this.wrote(prompt + 1);
    s.backend.synchronize();
    const afterWarmup = this.backend.memInfo().free;
    const form = s.form;
    const tokens = Math.min(MEASURED_CACHE_TOKENS, cfg.n_positions);
    const extra = this.backend.alloc(cacheBytes({ ...cfg, n_positions: tokens }, form));
    this.backend.fill32(extra, 0); // touch every page: host memory is committed on first write
    this.backend.synchronize();
    const afterCache = this.backend.memInfo().free;
    this.backend.free(extra);
    const a = s.resident.allocations;
    const perTokenFormula = kvBytesPerToken(cfg, DTYPE_BYTES[form.kv]);
    const measuredCache = this.memoryBefore === 0 ? 0 : afterWarmup - afterCache;
    const weightBytes = a.weights.bytes;
    const ownBytes = a.weights.bytes + a.cache.bytes + a.activations.bytes;
    const tokensToWeights = weightBytes / perTokenFormula;
    return {
      fit: this.fit,
      resident_source: this.backend.residentSource,
      weight_bytes: weightBytes,
      kv_bytes_per_token_formula: perTokenFormula,
      kv_bytes_per_token_measured: measuredCache / tokens,
      kv_cache_tokens: tokens,
      kv_cache_bytes_formula: perTokenFormula * tokens,
      kv_cache_bytes_measured: measuredCache,
      workspace_bytes: Math.max(0, this.memoryBefore - afterWarmup - ownBytes),
      how_measured:
        `${this.backend.memInfoSource} before and after allocating and ` +
        `touching a second ${tokens}-token cache, after a warm-up step; workspace = (free before the session − free after ` +
        `the warm-up) − (weights + cache + activations the session allocated)`,
      crossover: [1, 2, 4, 8, 16, 32, 64].map((batch) => ({ batch, context: Math.ceil(tokensToWeights / batch) })),
    };
  }

  close(): void {
    this.session.close();
  }
}
