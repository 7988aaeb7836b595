// The interventions: the same cached step with its bytes changed (weights and KV cache stored as f32, bf16 or
// f16) and with several sequences decoded at once (each weight read once for all of them), timed at every
// context in one launch mode, the configurations interleaved step by step (A B C A B C …) so that drift on a
// shared machine hits all of them alike.
import type { Backend } from "../backends/backend.ts";
import type { Instrument, TimedStep } from "../backends/instrument.ts";
import type { ModelWeights } from "../model/architectures.ts";
import type { StepForm } from "../plan.ts";
import type { LaunchMode } from "../run/launch-modes.ts";
import { Session } from "../run/session.ts";
import { summarize, type Stats } from "../stats.ts";
import { fillCache, type FillMethod } from "./fill.ts";

/** One configuration's samples at one context: device time per step (every sequence's token). */
export interface InterventionSample {
  form: StepForm;
  context: number;
  step_ms: Stats;
}

export interface InterventionOptions {
  contexts: number[];
  repeats: number;
  warmup: number;
  seed: number;
  /** a safe point between steps, outside the timed region */
  checkpoint: () => Promise<void>;
  onContext?: (context: number) => void;
  /** how the study filled the cache at a context (each sequence is filled the same way) */
  fillOf: (context: number) => FillMethod;
}

const sameForm = (a: StepForm, b: StepForm) =>
  a.plan === b.plan && a.batch === b.batch && a.weights === b.weights && a.kv === b.kv;

/**
 * Times every form's cached decode step in `mode` at every context. `reuse` is a session already holding one of
 * the forms (the study's own); the others are placed here and freed at the end.
 */
export async function measureInterventions(
  backend: Backend,
  instrument: Instrument,
  weights: ModelWeights,
  forms: StepForm[],
  mode: LaunchMode,
  reuse: Session<ModelWeights>,
  opts: InterventionOptions,
): Promise<InterventionSample[]> {
  const owned: Session<ModelWeights>[] = [];
  const sessions = forms.map((form) => {
    if (sameForm(form, reuse.form)) return reuse;
    const s = new Session(backend, weights, { form, maxContext: reuse.config.n_positions });
    owned.push(s);
    return s;
  });
  try {
    const samples: InterventionSample[] = [];
    for (const context of opts.contexts) {
      opts.onContext?.(context);
      const timed = await timeContext(sessions, instrument, mode, context, opts);
      samples.push(
        ...forms.map((form, i) => ({ form, context, step_ms: summarize(timed[i]!.map((t) => t.deviceMs)) })),
      );
    }
    return samples;
  } finally {
    for (const s of owned) s.close();
  }
}

/** Every session's sequences filled to `context` (a prompt of its own each, filled as the study's point was), then interleaved rounds of one step per session. */
async function timeContext(
  sessions: Session<ModelWeights>[],
  instrument: Instrument,
  mode: LaunchMode,
  context: number,
  opts: InterventionOptions,
): Promise<TimedStep[][]> {
  for (const s of sessions) {
    for (let b = 0; b < s.batch; b++) fillCache(s, opts.fillOf(context), context, opts.seed + b, b);
  }
  const timeOne = async (s: Session<ModelWeights>): Promise<TimedStep> => {
    await opts.checkpoint();
    s.setPosition(context);
    s.backend.synchronize();
    return instrument.time(() => mode.run(s.step(1), 1));
  };
  for (const s of sessions) for (let w = 0; w < opts.warmup; w++) await timeOne(s);
  const samples = sessions.map((): TimedStep[] => []);
  for (let r = 0; r < opts.repeats; r++) {
    for (const [i, s] of sessions.entries()) samples[i]!.push(await timeOne(s));
  }
  for (const s of sessions) {
    const what = `of the ${mode.name} step at context ${context} (batch ${s.batch}, weights ${s.form.weights}, cache ${s.form.kv})`;
    s.checkLogits(what, 1, () => s.setPosition(context));
  }
  return samples;
}
