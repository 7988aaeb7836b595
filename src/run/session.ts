// A model resident on a backend for one or more sequences, and the ways to run it: prefill (a sequence at a
// time), cached decode steps of every sequence at once in each launch mode, the uncached baseline, and
// full-sequence logits.
import type { Backend } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import { familyNameOf, type FamilyName, type ModelConfig, type ModelWeights } from "../model/architectures.ts";
import type { LlamaConfig, LlamaWeights } from "../model/llama.ts";
import type { GPT2Weights } from "../model/gpt2.ts";
import { STATE_INTS, STATE_POS } from "../ops.ts";
import type { LlamaBuffers } from "../plan-llama.ts";
import { passesOf, stepOf, type StepBuffers } from "../plans.ts";
import { DEFAULT_STEP_FORM, type PlanKind, type PlanOp, type StepForm } from "../plan.ts";
import type { ModelBuffers } from "../plan-gpt2.ts";
import { launchMode, modeForm, type LaunchMode, type ModeForm } from "./launch-modes.ts";
import { firstNonFinite, firstNonFiniteOp, nonFiniteMessage } from "./finite.ts";
import { llamaPlacementBytes, llamaSequenceView, placeLlama, type ResidentLlama } from "./llama-buffers.ts";
import { gpt2PlacementBytes, placeModel, sequenceView, type ResidentModel } from "./gpt2-buffers.ts";
import type { PlacedWeights, PlacementBytes } from "./model-buffers.ts";
import { CompiledStep } from "./step.ts";
import { SYNTHETIC_SAMPLE_ROWS, writeSyntheticRows, type SequenceCache } from "./synthetic-fill.ts";

const INT32_BYTES = 4;
const FLOAT_BYTES = 4;

export interface SessionOptions {
  /** its decode steps' plan (several-row steps are unfused either way), sequences and storage types (default: DEFAULT_STEP_FORM) */
  form?: StepForm;
  /** the most rows a step may have (default: a pass's, PASS_ROWS or the positions held if fewer, or the batch if larger) */
  maxRows?: number;
  /**
   * the most positions a sequence reaches (default: the model's n_positions): a rotary model's cache, rotary table
   * and activations are sized by it (GPT-2's position table is n_positions long either way)
   */
  maxContext?: number;
  /**
   * a session whose weights this one reads rather than placing its own: the same weights stored in the same type,
   * reaching at least as many positions (lendsWeights)
   */
  weightsFrom?: Session<ModelWeights>;
}

type Resident = ResidentModel | ResidentLlama;

/** What the run layer knows of a family: how its weights go onto a backend, one sequence's view, its output head. */
interface ResidentFamily<W extends ModelWeights, B extends StepBuffers> {
  /** the weights, cache and activations on `backend`, sequences reaching at most maxContext positions */
  place(
    backend: Backend,
    weights: W,
    form: StepForm,
    maxRows: number | undefined,
    maxContext: number | undefined,
    shared: PlacedWeights | undefined,
  ): Resident;
  /** what place allocates, computed without allocating */
  bytes(
    backend: Backend,
    config: W["config"],
    form: StepForm,
    maxRows: number | undefined,
    maxContext: number | undefined,
  ): PlacementBytes;
  /** the positions its sequences may reach when placed for maxContext */
  positions(config: W["config"], maxContext: number | undefined): number;
  /** the buffers of sequence b alone */
  sequenceView(buffers: B, b: number): B;
  /** the (V, C) matrix the logits are read through */
  outputHead(buffers: B): number;
}
type AnyResidentFamily = ResidentFamily<ModelWeights, StepBuffers>;

/** A rotary model's config as placed for sequences reaching maxContext positions. */
const heldConfig = (cfg: LlamaConfig, maxContext: number | undefined): LlamaConfig => ({
  ...cfg,
  n_positions: Math.min(maxContext ?? cfg.n_positions, cfg.n_positions),
});

const RESIDENT_FAMILIES: { [F in FamilyName]: AnyResidentFamily } = {
  gpt2: {
    // GPT-2's position table is n_positions long whatever the run's context
    place: (backend, weights, form, maxRows, _maxContext, shared) =>
      placeModel(backend, weights, form, maxRows, shared),
    bytes: (backend, cfg, form, maxRows) => gpt2PlacementBytes(backend, cfg, form, maxRows),
    positions: (cfg) => cfg.n_positions,
    sequenceView,
    outputHead: (b) => b.wte,
  } satisfies ResidentFamily<GPT2Weights, ModelBuffers> as AnyResidentFamily,
  llama: {
    // a rotary model's cache, rotary table and activations are sized by the positions its sequences reach
    place: (backend, weights, form, maxRows, maxContext, shared) =>
      placeLlama(backend, { ...weights, config: heldConfig(weights.config, maxContext) }, form, maxRows, shared),
    bytes: (backend, cfg, form, maxRows, maxContext) =>
      llamaPlacementBytes(backend, heldConfig(cfg, maxContext), form, maxRows),
    positions: (cfg, maxContext) => heldConfig(cfg, maxContext).n_positions,
    sequenceView: llamaSequenceView,
    outputHead: (b) => b.lm_head,
  } satisfies ResidentFamily<LlamaWeights, LlamaBuffers> as AnyResidentFamily,
};

/** A session of GPT-2 (the default) or of a Llama-family model. */
export class Session<W extends ModelWeights = GPT2Weights> {
  readonly resident: Resident;
  private readonly family: AnyResidentFamily;
  /** compiled steps by "<sequence or all>:<T>" */
  private readonly steps = new Map<string, CompiledStep>();
  private readonly stateWords: Int32Array;
  private logitsCheck: Float32Array<ArrayBuffer> | undefined;

  constructor(
    readonly backend: Backend,
    readonly weights: W,
    opts: SessionOptions = {},
  ) {
    const form = opts.form ?? DEFAULT_STEP_FORM;
    this.family = RESIDENT_FAMILIES[familyNameOf(weights.config)];
    const lender = opts.weightsFrom;
    if (lender && !lender.lendsWeights(backend, weights, form, opts.maxContext))
      throw new Error("a session can read only the weights it would place itself (Session.lendsWeights)");
    const shared = lender?.resident.weights;
    this.resident = this.family.place(backend, weights, form, opts.maxRows, opts.maxContext, shared);
    this.stateWords = new Int32Array(this.batch * STATE_INTS);
  }

  /**
   * Whether a session of `weights` in `form` reaching maxContext positions can read this one's weights: the same
   * weights on the same backend, stored in the same type, placed for at least its positions.
   */
  lendsWeights(backend: Backend, weights: ModelWeights, form: StepForm, maxContext: number | undefined): boolean {
    return (
      backend === this.backend &&
      weights === this.weights &&
      form.weights === this.form.weights &&
      this.resident.weights.positions >= Session.positionsHeld(weights.config, maxContext)
    );
  }

  /** What a session of this config and options would allocate (weights, cache, activations), allocating nothing. */
  static placementBytes(backend: Backend, config: ModelConfig, opts: SessionOptions = {}): PlacementBytes {
    const family = RESIDENT_FAMILIES[familyNameOf(config)];
    return family.bytes(backend, config, opts.form ?? DEFAULT_STEP_FORM, opts.maxRows, opts.maxContext);
  }

  /** The positions a session of this config placed for maxContext holds (GPT-2's: its n_positions, whatever the context). */
  static positionsHeld(config: ModelConfig, maxContext: number | undefined): number {
    return RESIDENT_FAMILIES[familyNameOf(config)].positions(config, maxContext);
  }

  /** the model's config as placed: n_positions is the positions its sequences can reach */
  get config(): W["config"] {
    return this.resident.buffers.config as W["config"];
  }

  /** its decode steps: plan, sequences and storage types (what the launch modes a step can run in depend on) */
  get form(): StepForm {
    return this.resident.form;
  }

  /** the step's form as the launch modes judge it */
  get modeForm(): ModeForm {
    return modeForm(this.form, this.config);
  }

  /** the ops of its decode steps */
  get plan(): PlanKind {
    return this.form.plan;
  }

  /** sequences decoded together */
  get batch(): number {
    return this.form.batch;
  }

  /** The step for T new rows of every sequence, compiled once and kept (T = 1 is the decode step). */
  step(T: number): CompiledStep {
    return this.compiled(`all:${T}`, () => this.stepOf(this.resident.buffers, T));
  }

  /** The step for T new rows of sequence b alone (a prefill, a recompute). */
  sequenceStep(b: number, T: number): CompiledStep {
    if (this.batch === 1) return this.step(T);
    return this.compiled(`${b}:${T}`, () => this.stepOf(this.family.sequenceView(this.resident.buffers, b), T));
  }

  /**
   * Passes over `rows` rows of sequence b (of every sequence when b is undefined) from position `from`, to be run
   * in order, eagerly, once the position is set to `from`: each of at most the activations' rows (passesOf), only
   * the last writing the next token — the others' argmax goes to the sink, so that the prompt's own tokens after
   * them stay. `last`: the last pass's rows and first position (what checkLogits re-runs).
   */
  passes(
    rows: number,
    b?: number,
    from = 0,
  ): { steps: CompiledStep[]; each: { T: number; pos: number }[]; last: { T: number; pos: number } } {
    const whole = b === undefined || this.batch === 1;
    const buffers = whole ? this.resident.buffers : this.family.sequenceView(this.resident.buffers, b);
    const key = whole ? "all" : String(b);
    const passes = passesOf(rows, Math.floor(this.resident.buffers.maxRows / buffers.batch), from);
    const steps = passes.map(({ T }, i) =>
      i === passes.length - 1
        ? whole
          ? this.step(T)
          : this.sequenceStep(b!, T)
        : this.compiled(`${key}:${T}:into-sink`, () => this.stepOf({ ...buffers, next: buffers.sink }, T)),
    );
    return { steps, each: passes, last: passes[passes.length - 1]! };
  }

  /** The architecture's step over these buffers. */
  private stepOf(buffers: StepBuffers, T: number): PlanOp[] {
    return stepOf(buffers, T, this.plan);
  }

  private compiled(key: string, build: () => PlanOp[]): CompiledStep {
    let s = this.steps.get(key);
    if (!s) {
      s = new CompiledStep(this.backend, build());
      this.steps.set(key, s);
    }
    return s;
  }

  /** Runs a step of T rows of every sequence in a launch mode (asynchronous on CUDA). */
  run(T: number, mode: LaunchMode = launchMode("eager")): void {
    if (!mode.available(this.backend, this.modeForm))
      throw new UserError(
        `launch mode ${mode.name} is not available on the ${this.backend.kind} backend for this step`,
      );
    mode.run(this.step(T), 1);
  }

  checkContext(total: number): void {
    const max = this.config.n_positions;
    if (total > max) {
      throw new UserError(`context overflow: ${total} tokens exceed the model's n_positions (${max})`);
    }
  }

  /** Writes tokens into sequence b's device tokens at [0, ids.length). */
  setSequence(ids: ArrayLike<number>, b = 0): void {
    this.checkContext(ids.length);
    this.backend.upload(this.region("seq"), Int32Array.from(ids as ArrayLike<number>), this.offset("seq", b));
  }

  /** Sets sequence b's position, or every sequence's when b is omitted. */
  setPosition(pos: number, b?: number): void {
    this.stateWords.fill(0);
    for (let s = 0; s < this.batch; s++) this.stateWords[s * STATE_INTS + STATE_POS] = pos;
    if (b === undefined) {
      this.backend.upload(this.region("state"), this.stateWords);
      return;
    }
    this.backend.upload(this.region("state"), this.stateWords.subarray(0, STATE_INTS), this.offset("state", b));
  }

  position(b = 0): number {
    this.backend.download(this.region("state"), this.stateWords);
    return this.stateWords[b * STATE_INTS + STATE_POS]!;
  }

  readSequence(length: number, b = 0): number[] {
    const out = new Int32Array(length);
    this.backend.download(this.region("seq"), out, this.offset("seq", b));
    return Array.from(out);
  }

  /** Sequence b's logits from the last step. */
  readLogits(into = new Float32Array(this.config.vocab_size), b = 0): Float32Array {
    this.backend.download(this.region("logits"), into, this.offset("logits", b));
    return into;
  }

  /**
   * Throws a UserError if the logits left by the last step of T rows (of every sequence, or of sequence
   * `only`) are not finite, naming the first op that produced a non-finite value: the step is re-run eagerly,
   * op by op, after `reset` restores its positions (the ops before it rewrite the same values, so the re-run
   * reproduces the step).
   */
  checkLogits(what: string, T: number, reset: () => void, only?: number): void {
    this.logitsCheck ??= new Float32Array(this.config.vocab_size);
    const logits = this.logitsCheck;
    for (let b = 0; b < this.batch; b++) {
      if (only !== undefined && b !== only) continue;
      const at = firstNonFinite(this.readLogits(logits, b));
      if (at < 0) continue;
      const step = only === undefined ? this.step(T) : this.sequenceStep(only, T);
      const origin = firstNonFiniteOp(this.backend, step, reset);
      throw new UserError(
        nonFiniteMessage(this.batch > 1 ? `${what} (sequence ${b})` : what, logits, at, origin, step.ops.length),
      );
    }
  }

  /**
   * Prefill of sequence b: its prompt from position `from` (the rows before it already in its cache: a kept
   * prefix) in eager passes of at most the activations' rows; leaves its first generated token at
   * seq_b[prompt.length] and its position there.
   */
  prefill(prompt: number[], b = 0, from = 0): void {
    if (from >= prompt.length) throw new RangeError(`a prefill from ${from} of a ${prompt.length}-token prompt`);
    this.setSequence(prompt, b);
    this.setPosition(from, b);
    for (const step of this.passes(prompt.length - from, b, from).steps) step.runEager();
  }

  /** Sequence b's K/V cache: per layer, rows of kvColumns(config) in the cache's dtype. */
  sequenceCache(b = 0): SequenceCache {
    return this.family.sequenceView(this.resident.buffers, b);
  }

  /**
   * Sequence b's cache filled to prompt.length tokens with a prefill of only the first SYNTHETIC_SAMPLE_ROWS:
   * the rows past them drawn to the real rows' distribution (synthetic-fill.ts). Its tokens are the prompt, the
   * last one again at seq_b[prompt.length] (the next step's input), and its position is prompt.length.
   */
  fillSynthetic(prompt: number[], seed: number, b = 0): void {
    const n = prompt.length;
    if (n <= SYNTHETIC_SAMPLE_ROWS) {
      this.prefill(prompt, b);
      return;
    }
    this.checkContext(n + 1);
    this.prefill(prompt.slice(0, SYNTHETIC_SAMPLE_ROWS), b);
    writeSyntheticRows(this.backend, this.sequenceCache(b), SYNTHETIC_SAMPLE_ROWS, n, seed);
    this.setSequence([...prompt, prompt[n - 1]!], b);
    this.setPosition(n, b);
  }

  /** Logits (len, V) at every position of `ids`, from an uncached prefill of sequence 0 (each pass's rows after it). */
  logitsAtEveryPosition(ids: number[]): Float32Array {
    const { vocab_size: V, n_embd: C } = this.config;
    const b = this.resident.buffers;
    const head = this.family.outputHead(b);
    this.setSequence(ids, 0);
    this.setPosition(0, 0);
    const out = new Float32Array(ids.length * V);
    const { steps, each } = this.passes(ids.length, 0);
    steps.forEach((step, i) => {
      step.runEager();
      const { T, pos } = each[i]!;
      // the LM head reads the last of its T rows of ln: the pass's row t at T = t + 1
      for (let t = 0; t < T; t++) {
        this.backend.ops.op_lm_head(b.logits, b.ln, head, 1, t + 1, C, V, b.dtypes.weights);
        this.readLogits(out.subarray((pos + t) * V, (pos + t + 1) * V));
      }
    });
    return out;
  }

  /** One of the per-sequence regions (tokens, state, logits) as a buffer over every sequence. */
  private region(name: "seq" | "state" | "logits") {
    return { ptr: this.resident.buffers[name], bytes: this.batch * this.rowBytes(name) };
  }

  /** Byte offset of sequence b's part of a per-sequence region. */
  private offset(name: "seq" | "state" | "logits", b: number): number {
    if (!Number.isInteger(b) || b < 0 || b >= this.batch)
      throw new RangeError(`sequence ${b} outside 0..${this.batch - 1}`);
    return b * this.rowBytes(name);
  }

  private rowBytes(name: "seq" | "state" | "logits"): number {
    const cfg = this.config;
    return {
      seq: (cfg.n_positions + 1) * INT32_BYTES,
      state: STATE_INTS * INT32_BYTES,
      logits: cfg.vocab_size * FLOAT_BYTES,
    }[name];
  }

  close(): void {
    for (const s of this.steps.values()) s.destroy();
    this.steps.clear();
    this.resident.free();
  }
}
