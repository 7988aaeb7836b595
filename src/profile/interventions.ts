// The interventions: the same cached step with its bytes changed (weights and KV cache stored as f32, bf16 or
// f16), with several sequences decoded at once (each weight read once for all of them) and with its attention
// reshaped to other K/V-head counts (MHA, GQA, MQA: seeded weights of each other shape), timed at every context in one
// launch mode, the configurations interleaved step by step (A B C A B C …) so that drift on a shared machine hits
// all of them alike — every K/V-head variant at once where their weights and caches fit in memory together, one
// variant after another where they do not.
import type { Backend } from "../backends/backend.ts";
import type { Instrument, PairedStep } from "../backends/instrument.ts";
import { kvHeadsOf, type ModelWeights } from "../model/architectures.ts";
import type { StepForm } from "../plan.ts";
import type { LaunchMode } from "../run/launch-modes.ts";
import { Session } from "../run/session.ts";
import { summarize, type Stats } from "../stats.ts";
import { fillCache, type FillMethod } from "./fill.ts";
import { cachedStepWork, sumWork } from "./work-model.ts";

/**
 * Of the memory usable beside the study's session, the share the K/V-head variants' sessions may take at once to be
 * placed together (memory-fit.ts groupsFitTogether): on the 24 GiB VM, three llama-3.2-1b variants placed in 82% of
 * it ran 1.4–4.5× slower at 8,191 than one at a time.
 */
export const TOGETHER_MEMORY_SHARE = 0.5;

/** The model with one K/V-head count: the study's own weights, or seeded weights of the reshaped config (streamed when placed). */
export interface KvVariant {
  kv_heads: number;
  weights: ModelWeights;
}

/** One configuration's samples at one context: device time per step (every sequence's token). */
export interface InterventionSample {
  form: StepForm;
  kv_heads: number;
  context: number;
  /** how every sequence's cache was filled to `context`: as the study's point at that context */
  fill: FillMethod;
  step_ms: Stats;
  /** every timed step's device ms with the memory's read pass right before it */
  paired: PairedStep[];
}

export interface InterventionOptions {
  contexts: number[];
  repeats: number;
  warmup: number;
  seed: number;
  /** a safe point between steps, outside the timed region */
  checkpoint: () => Promise<void>;
  /** a group of `configurations` is about to be timed at `context`, its caches filled by `fill` */
  onContext?: (context: number, configurations: number, fill: FillMethod) => void;
  /** how the study filled the cache at a context (each sequence is filled the same way) */
  fillOf: (context: number) => FillMethod;
  /** a line for the user: how the K/V-head variants are timed */
  say?: (line: string) => void;
  /** every K/V-head variant placed at once (the run's memory fit decided: study.ts variantsTogether) */
  together: boolean;
}

export interface InterventionsResult {
  samples: InterventionSample[];
  /** every K/V-head variant placed at once and interleaved (true), or one after another because together they do not fit */
  together: boolean;
}

const sameForm = (a: StepForm, b: StepForm) =>
  a.plan === b.plan && a.batch === b.batch && a.weights === b.weights && a.kv === b.kv;

/** A configuration placed beside the study's session, and whether it places weights or reads ones placed before it. */
export interface PlacedForm {
  form: StepForm;
  ownWeights: boolean;
}

/**
 * The forms of one K/V-head variant placed beside the study's session (its own form is the study's session), each
 * placing its weights only where neither the study's session nor an earlier form holds them in the same type
 * (Session.lendsWeights: every session here reaches at most the study's positions).
 */
export function placedForms(
  variant: ModelWeights,
  forms: StepForm[],
  study: { weights: ModelWeights; form: StepForm },
): PlacedForm[] {
  const held = new Set(variant === study.weights ? [study.form.weights] : []);
  return forms
    .filter((form) => variant !== study.weights || !sameForm(form, study.form))
    .map((form) => {
      const ownWeights = !held.has(form.weights);
      held.add(form.weights);
      return { form, ownWeights };
    });
}

/**
 * Times every form of every K/V-head variant's cached decode step in `mode` at every context. `reuse` is a session
 * already holding one of them (the study's own); the others are placed here and freed when their group is done.
 */
export async function measureInterventions(
  backend: Backend,
  instrument: Instrument,
  variants: KvVariant[],
  forms: StepForm[],
  mode: LaunchMode,
  reuse: Session<ModelWeights>,
  opts: InterventionOptions,
): Promise<InterventionsResult> {
  const maxContext = Math.max(...opts.contexts) + 1;
  const together = opts.together;
  if (variants.length > 1 && !together)
    opts.say?.(
      `note: the ${variants.length} K/V-head variants' weights and caches do not fit in memory together: timed one variant after another`,
    );
  const groups = together ? [variants] : variants.map((v) => [v]);
  const samples: InterventionSample[] = [];
  for (const group of groups)
    samples.push(...(await measureGroup(backend, instrument, group, forms, mode, reuse, opts, maxContext)));
  const order = (x: InterventionSample) => opts.contexts.indexOf(x.context);
  return { samples: samples.sort((a, b) => order(a) - order(b)), together };
}

/**
 * One group of variants, every form of each placed at once (each reading the weights of a session that holds them
 * in its type: the study's, or another form's), timed interleaved at every context.
 */
async function measureGroup(
  backend: Backend,
  instrument: Instrument,
  group: KvVariant[],
  forms: StepForm[],
  mode: LaunchMode,
  reuse: Session<ModelWeights>,
  opts: InterventionOptions,
  maxContext: number,
): Promise<InterventionSample[]> {
  const owned: Session<ModelWeights>[] = [];
  try {
    const configs = group.flatMap((variant) => {
      const placed = placedForms(variant.weights, forms, reuse);
      return forms.map((form) => {
        const p = placed.find((x) => x.form === form);
        if (!p) return { variant, form, session: reuse };
        // placed as the memory fit counted it: its own weights, or those of a session holding them already
        const weightsFrom = p.ownWeights
          ? undefined
          : [reuse, ...owned].find((s) => s.lendsWeights(backend, variant.weights, form, maxContext));
        if (!p.ownWeights && !weightsFrom)
          throw new Error(`no session holds the ${form.weights} weights placedForms counted`);
        const s = new Session(backend, variant.weights, { form, maxContext, ...(weightsFrom ? { weightsFrom } : {}) });
        owned.push(s);
        return { variant, form, session: s };
      });
    });
    const samples: InterventionSample[] = [];
    for (const context of opts.contexts) {
      const fill = opts.fillOf(context);
      opts.onContext?.(context, configs.length, fill);
      const timed = await timeContext(
        configs.map((c) => c.session),
        instrument,
        mode,
        context,
        opts,
      );
      samples.push(
        ...configs.map(({ variant, form }, i) => ({
          form,
          kv_heads: variant.kv_heads,
          context,
          fill,
          step_ms: summarize(timed[i]!.map((t) => t.ms)),
          paired: timed[i]!,
        })),
      );
    }
    return samples;
  } finally {
    for (const s of owned) s.close();
  }
}

/**
 * Every session's sequences filled to `context` (a prompt of its own each, filled as the study's point was), then
 * interleaved rounds of one step per session, each timed step right after a pass of the memory read.
 */
async function timeContext(
  sessions: Session<ModelWeights>[],
  instrument: Instrument,
  mode: LaunchMode,
  context: number,
  opts: InterventionOptions,
): Promise<PairedStep[][]> {
  for (const s of sessions) {
    for (let b = 0; b < s.batch; b++) fillCache(s, opts.fillOf(context), context, opts.seed + b, b);
  }
  const timeOne = async (s: Session<ModelWeights>): Promise<number> => {
    await opts.checkpoint();
    s.setPosition(context);
    s.backend.synchronize();
    return instrument.time(() => mode.run(s.step(1), 1)).deviceMs;
  };
  for (const s of sessions) for (let w = 0; w < opts.warmup; w++) await timeOne(s);
  const bytes = sessions.map((s) => sumWork(cachedStepWork(s.config, context, s.form)).bytes);
  const samples = sessions.map((): PairedStep[] => []);
  for (let r = 0; r < opts.repeats; r++) {
    for (const [i, s] of sessions.entries()) {
      const read = instrument.readPass(bytes[i]!);
      samples[i]!.push({ ms: await timeOne(s), read });
    }
  }
  for (const s of sessions) {
    const what = `of the ${mode.name} step at context ${context} (batch ${s.batch}, weights ${s.form.weights}, cache ${s.form.kv}, ${kvHeadsOf(s.config)} K/V heads)`;
    s.checkLogits(what, 1, () => s.setPosition(context));
  }
  return samples;
}
