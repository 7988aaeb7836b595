// How the study fills the KV cache at each context, and whether it times the uncached baseline there. A real
// prefill of tens of thousands of tokens takes minutes on the CPU, and a timing point needs only a cache of
// the right size: past what the work model at the measured prefill rate puts under PREFILL_LIMIT_S, the cache
// is filled synthetically (run/synthetic-fill.ts), and past UNCACHED_TIMED_LIMIT_S per step the uncached
// baseline's time is the work model's at that rate, labelled as such.
import type { ModelConfig, ModelWeights } from "../model/architectures.ts";
import type { StepForm } from "../plan.ts";
import type { Session } from "../run/session.ts";
import { SYNTHETIC_SAMPLE_ROWS } from "../run/synthetic-fill.ts";
import { promptOf } from "./prompts.ts";
import { sumWork, uncachedStepWork } from "./work-model.ts";

export const FILL_METHODS = ["prefill", "synthetic"] as const;
export type FillMethod = (typeof FILL_METHODS)[number];
/** profile --fill: one method at every point, or `auto` (each point by the limits below) */
export const FILL_CHOICES = [...FILL_METHODS, "auto"] as const;
export type FillChoice = (typeof FILL_CHOICES)[number];

/** A point's prefill estimated past this many seconds is filled synthetically (--fill auto). */
export const PREFILL_LIMIT_S = 10;
/** The uncached baseline is timed where one of its steps is estimated under this many seconds. */
export const UNCACHED_TIMED_LIMIT_S = 5;
/** Tokens of the prefill timed before the first point, when nothing else has measured the rate yet. */
export const CALIBRATION_TOKENS = 128;

/** How one context is filled and whether its uncached baseline is timed (else its time is the work model's). */
export interface PointFill {
  context: number;
  fill: FillMethod;
  uncached_timed: boolean;
  /** the uncached step at the measured prefill rate (work model), where it is not timed */
  uncached_model_ms: number | null;
}

/** FLOPs of a prefill (or uncached step) of `tokens` rows from position 0, by the work model. */
const prefillFlops = (cfg: ModelConfig, form: StepForm, tokens: number) =>
  sumWork(uncachedStepWork(cfg, tokens - 1, form)).flops;

/** The prefill rate the decisions use: that of the longest real prefill timed so far. */
export class PrefillRate {
  private longest = 0;
  private flopsPerS = 0;

  constructor(
    private readonly config: ModelConfig,
    private readonly form: StepForm,
  ) {}

  /** A real prefill of `tokens` rows took `ms`. */
  observe(tokens: number, ms: number): void {
    if (tokens < this.longest || !(ms > 0)) return;
    this.longest = tokens;
    this.flopsPerS = prefillFlops(this.config, this.form, tokens) / (ms / 1e3);
  }

  /** FLOP/s measured (0 before any prefill) */
  get measured(): number {
    return this.flopsPerS;
  }

  /** seconds a prefill of `tokens` rows takes at the measured rate */
  seconds(tokens: number): number {
    if (!(this.flopsPerS > 0)) throw new RangeError("no prefill has been timed yet");
    return prefillFlops(this.config, this.form, tokens) / this.flopsPerS;
  }
}

/**
 * How context `context` is filled: `choice`, or under `auto` by the estimate of its prefill (a real prefill up to
 * SYNTHETIC_SAMPLE_ROWS either way); and whether its uncached baseline is timed.
 */
export function pointFill(context: number, choice: FillChoice, rate: PrefillRate, uncached: boolean): PointFill {
  const fill =
    context <= SYNTHETIC_SAMPLE_ROWS // a synthetic fill this short is its real prefix alone
      ? "prefill"
      : choice !== "auto"
        ? choice
        : rate.seconds(context) <= PREFILL_LIMIT_S
          ? "prefill"
          : "synthetic";
  const uncachedS = rate.seconds(context + 1); // the whole sequence and the new token recomputed
  const timed = !uncached || uncachedS <= UNCACHED_TIMED_LIMIT_S;
  return { context, fill, uncached_timed: timed, uncached_model_ms: uncached && !timed ? uncachedS * 1e3 : null };
}

/** Sequence b of `s` filled to `context` tokens of the study's prompt (seed `seed`), by `fill`. */
export function fillCache(s: Session<ModelWeights>, fill: FillMethod, context: number, seed: number, b = 0) {
  const prompt = promptOf(context, s.config.vocab_size, seed);
  if (fill === "prefill") s.prefill(prompt, b);
  else s.fillSynthetic(prompt, seed, b);
}
