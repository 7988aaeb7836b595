// A model resident on a backend, and the ways to run it: prefill, cached decode steps in each launch
// mode, the uncached baseline, and full-sequence logits.
import type { Backend } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import type { GPT2Weights } from "../model/weights.ts";
import { STATE_INTS, STATE_POS } from "../ops.ts";
import { decodeStep, type PlanKind } from "../plan.ts";
import { launchMode, type LaunchMode } from "./launch-modes.ts";
import { firstNonFinite, firstNonFiniteOp, nonFiniteMessage } from "./finite.ts";
import { placeModel, type ResidentModel } from "./model-buffers.ts";
import { CompiledStep } from "./step.ts";

const INT32_BYTES = 4;

export class Session {
  readonly resident: ResidentModel;
  private readonly steps = new Map<number, CompiledStep>();
  private readonly stateWords = new Int32Array(STATE_INTS);
  private logitsCheck: Float32Array<ArrayBuffer> | undefined;

  /** `plan`: the ops of its decode steps (src/plan.ts PlanKind; several-row steps are unfused either way) */
  constructor(readonly backend: Backend, readonly weights: GPT2Weights, maxRows?: number, readonly plan: PlanKind = "fused") {
    this.resident = placeModel(backend, weights, maxRows);
  }

  get config() {
    return this.weights.config;
  }

  /** The step for T new rows, compiled once and kept (T = 1 is the decode step). */
  step(T: number): CompiledStep {
    let s = this.steps.get(T);
    if (!s) {
      s = new CompiledStep(this.backend, decodeStep(this.resident.buffers, T, this.plan));
      this.steps.set(T, s);
    }
    return s;
  }

  /** Runs a step of T rows in a launch mode (asynchronous on CUDA). */
  run(T: number, mode: LaunchMode = launchMode("eager")): void {
    if (!mode.available(this.backend)) throw new UserError(`launch mode ${mode.name} is not available on the ${this.backend.kind} backend`);
    mode.run(this.step(T), 1);
  }

  checkContext(total: number): void {
    const max = this.config.n_positions;
    if (total > max) {
      throw new UserError(`context overflow: ${total} tokens exceed the model's n_positions (${max})`);
    }
  }

  /** Writes tokens into the device sequence at [0, ids.length). */
  setSequence(ids: ArrayLike<number>): void {
    this.checkContext(ids.length);
    const words = Int32Array.from(ids as ArrayLike<number>);
    this.backend.upload(this.bufferOf("seq"), words);
  }

  setPosition(pos: number): void {
    this.stateWords.fill(0);
    this.stateWords[STATE_POS] = pos;
    this.backend.upload(this.bufferOf("state"), this.stateWords);
  }

  position(): number {
    this.backend.download(this.bufferOf("state"), this.stateWords);
    return this.stateWords[STATE_POS]!;
  }

  readSequence(length: number): number[] {
    const out = new Int32Array(length);
    this.backend.download(this.bufferOf("seq"), out);
    return Array.from(out);
  }

  readLogits(into = new Float32Array(this.config.vocab_size)): Float32Array {
    this.backend.download(this.bufferOf("logits"), into);
    return into;
  }

  /**
   * Throws a UserError if the logits left by the last step of T rows are not finite, naming the first op
   * that produced a non-finite value: the step is re-run eagerly, op by op, after `reset` restores its
   * position (the ops before it rewrite the same values, so the re-run reproduces the step).
   */
  checkLogits(what: string, T: number, reset: () => void): void {
    const logits = this.readLogits(this.logitsCheck ??= new Float32Array(this.config.vocab_size));
    const at = firstNonFinite(logits);
    if (at < 0) return;
    const step = this.step(T);
    const origin = firstNonFiniteOp(this.backend, step, reset);
    throw new UserError(nonFiniteMessage(what, logits, at, origin, step.ops.length));
  }

  /** Prefill: the whole prompt in one pass at position 0; leaves the first generated token at seq[prompt.length]. */
  prefill(prompt: number[], mode?: LaunchMode): void {
    this.setSequence(prompt);
    this.setPosition(0);
    this.run(prompt.length, mode);
  }

  /** Logits (len, V) at every position of `ids`, from one uncached forward pass. */
  logitsAtEveryPosition(ids: number[]): Float32Array {
    const { vocab_size: V, n_embd: C } = this.config;
    const b = this.resident.buffers;
    this.prefill(ids);
    const out = new Float32Array(ids.length * V);
    for (let t = 0; t < ids.length; t++) {
      this.backend.ops.op_lm_head(b.logits, b.ln, b.wte, t + 1, C, V);
      this.readLogits(out.subarray(t * V, (t + 1) * V));
    }
    return out;
  }

  /** A view of one activation region as a buffer (for uploads/downloads of seq, state, logits). */
  private bufferOf(name: "seq" | "state" | "logits") {
    const b = this.resident.buffers;
    const bytes = { seq: (this.config.n_positions + 1) * INT32_BYTES, state: STATE_INTS * INT32_BYTES, logits: this.config.vocab_size * 4 }[name];
    return { ptr: b[name], bytes };
  }

  close(): void {
    for (const s of this.steps.values()) s.destroy();
    this.steps.clear();
    this.resident.free();
  }
}
