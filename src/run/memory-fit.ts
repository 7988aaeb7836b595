// Whether a run's sessions fit the memory its backend has, and the largest context that would: each session's
// bytes come from the layouts it would allocate (Session.placementBytes), so nothing is allocated to find out.
import { freemem } from "node:os";

import type { Backend } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import type { ModelConfig } from "../model/architectures.ts";
import type { StepForm } from "../plan.ts";
import type { DtypeName } from "../ops.ts";
import { cacheBytes, placementTotal, type PlacementBytes } from "./model-buffers.ts";
import { Session } from "./session.ts";

/** Memory the backend's allocations can take now: a GPU's free device memory; on the host, what Linux says is available. */
export function availableMemory(backend: Backend): { bytes: number; source: string } {
  if (backend.kind === "cuda") return { bytes: backend.memInfo().free, source: "cudaMemGetInfo free bytes" };
  return { bytes: freemem(), source: "host memory available (MemAvailable)" };
}

/** Tokens of the second cache the study allocates to measure a cache's bytes per token (study.ts measureMemory). */
export const MEASURED_CACHE_TOKENS = 1024;

/** A session a run places: its model, its steps' form, and whether it places weights (or reads another's). */
export interface PlannedSession {
  config: ModelConfig;
  form: StepForm;
  /** false: it reads weights another session of the run holds (default true) */
  ownWeights?: boolean;
}

/**
 * A run's sessions as they are resident: `study` for the whole run — its memory measurement allocating a cache of
 * MEASURED_CACHE_TOKENS beside it first —, then each group of `groups` beside it, one group at a time, or every
 * group at once where `together`.
 */
export interface RunPlacement {
  study: PlannedSession;
  groups: PlannedSession[][];
  together?: boolean;
}

const NO_BYTES: PlacementBytes = { weights: 0, cache: 0, activations: 0 };

/** What a planned session places when its sequences reach `maxContext` positions (no weights where it reads another's). */
function plannedBytes(backend: Backend, s: PlannedSession, maxContext: number): PlacementBytes {
  const bytes = Session.placementBytes(backend, s.config, { form: s.form, maxContext });
  return s.ownWeights === false ? { ...bytes, weights: 0 } : bytes;
}

/** What a group of sessions places at once. */
const groupBytes = (backend: Backend, group: PlannedSession[], maxContext: number) =>
  group.map((s) => plannedBytes(backend, s, maxContext)).reduce(addBytes, NO_BYTES);

/** The most bytes a run holds at once when its sequences reach `maxContext` positions, and its parts. */
export function runNeed(backend: Backend, run: RunPlacement, maxContext: number): PlacementBytes {
  const study = plannedBytes(backend, run.study, maxContext);
  const measured = { ...run.study.config, n_positions: Math.min(MEASURED_CACHE_TOKENS, maxContext) };
  const groups = run.together ? [run.groups.flat()] : run.groups;
  const beside = [
    { ...NO_BYTES, cache: cacheBytes(measured, run.study.form) }, // the memory measurement's cache
    ...groups.map((g) => groupBytes(backend, g, maxContext)),
  ].reduce((most, p) => (placementTotal(p) > placementTotal(most) ? p : most));
  return addBytes(study, beside);
}

/**
 * Whether a run's groups (profile --kv-heads' variants) go beside its study session all at once: where together
 * they take at most `share` of what `usable` leaves beside that session.
 */
export function groupsFitTogether(
  backend: Backend,
  run: RunPlacement,
  maxContext: number,
  usable: number,
  share: number,
): boolean {
  const study = placementTotal(plannedBytes(backend, run.study, maxContext));
  const all = placementTotal(groupBytes(backend, run.groups.flat(), maxContext));
  return all <= share * (usable - study);
}

const addBytes = (a: PlacementBytes, b: PlacementBytes): PlacementBytes => ({
  weights: a.weights + b.weights,
  cache: a.cache + b.cache,
  activations: a.activations + b.activations,
});

/**
 * The largest decode context (a step at context c holds c + 1 positions) at which the run's need fits in `free`
 * bytes, up to the model's limit; 0 when not even the first position fits. The need grows with the context.
 */
export function largestFittingContext(
  backend: Backend,
  run: RunPlacement,
  free: number,
  positions = run.study.config.n_positions,
): number {
  const fits = (context: number) => placementTotal(runNeed(backend, run, context + 1)) <= free;
  return fits(0) ? largestWhere(0, positions - 1, fits) : 0;
}

/** The largest n in [lo, hi] with fits(n), given fits(lo) and that fits turns false at most once as n grows. */
function largestWhere(lo: number, hi: number, fits: (n: number) => boolean): number {
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * Refuses one session (a generation's: nothing measured beside it) whose weights, cache for `positions` per
 * sequence and activations exceed the backend's free memory, naming the most positions its batch fits.
 */
export function checkSessionFits(backend: Backend, config: ModelConfig, form: StepForm, positions: number): void {
  const need = (held: number) => Session.placementBytes(backend, config, { form, maxContext: held });
  const free = availableMemory(backend).bytes;
  const fits = (held: number) => placementTotal(need(held)) <= free;
  const asked = need(positions);
  if (placementTotal(asked) <= free) return;
  const where = backend.kind === "cuda" ? "GPU" : "machine";
  throw new UserError(
    `memory: ${positions} positions × batch ${form.batch} need ${memoryBytes(placementTotal(asked))} at once (${needParts(asked)}) and the ${where} has ${memoryBytes(free)} free: ` +
      (fits(1)
        ? `at batch ${form.batch} at most ${largestWhere(1, positions - 1, fits)} positions fit (prompt + --max-new-tokens)`
        : `not even one position fits; ${narrowerWeights([form.weights], "--dtype bf16")}`),
  );
}

/**
 * The remedy where weights alone do not fit: where any of `types` is f32, storing them narrower (`flag`, as the
 * command takes it); else a smaller model, since no type is narrower than 2 bytes a parameter.
 */
export function narrowerWeights(types: readonly DtypeName[], flag: string): string {
  return types.includes("f32")
    ? `store the weights narrower (${flag})`
    : "the weights are already 2 bytes a parameter: take a smaller --preset or --model";
}

/** The study's session alone at batches 1…8: the largest context each fits (what the run reports it could reach). */
export function largestContextByBatch(
  backend: Backend,
  study: PlannedSession,
  free: number,
  batches = [1, 2, 4, 8],
): { batch: number; context: number }[] {
  return batches.map((batch) => ({
    batch,
    context: largestFittingContext(backend, { study: { ...study, form: { ...study.form, batch } }, groups: [] }, free),
  }));
}

/** Bytes as the memory lines give them: 4,943,257,600 → "4.94 GB", 3,418,112 → "3.4 MB". */
export const memoryBytes = (n: number) =>
  // each unit from where the one below would round to 1000 of it
  n >= 999.95e6
    ? `${(n / 1e9).toFixed(2)} GB`
    : n >= 999.95e3
      ? `${(n / 1e6).toFixed(1)} MB`
      : `${(n / 1e3).toFixed(1)} kB`;

/** One line each for a need's parts, e.g. "weights 4.9 GB + K/V cache 8.6 GB + activations 0.8 GB". */
export const needParts = (p: PlacementBytes) =>
  `weights ${memoryBytes(p.weights)} + K/V cache ${memoryBytes(p.cache)} + activations ${memoryBytes(p.activations)}`;
