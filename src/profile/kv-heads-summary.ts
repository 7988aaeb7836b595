// GQA as an intervention (profile --kv-heads): each K/V-head variant's cached step against the variant with the
// most heads — the time it saved beside the bytes it saved by the work model — and the context at which a
// variant's K/V read equals its weights' read (the crossover): by the work model, and measured where the run
// reaches it (the step has grown by its weights' time).
import type { InterventionConfig, InterventionPoint, KvHeadsSection } from "./types.ts";
import { pct } from "./verdicts.ts";
import { pastModel } from "../words.ts";

/** The configuration of a point without its K/V heads: storage types and batch. */
const storageKey = (p: Omit<InterventionConfig, "kv_heads">) => `${p.dtype}/${p.kv_dtype}/${p.batch}`;

/** How the savings are taken where the steps were paired with read passes (atOneReadRate). */
export const SAVING_AT_ONE_READ_RATE =
  "both steps are taken at the reference's read rate (each its bytes at that rate × its steps' median over their own " +
  "floors), as the variants' steps ran at different moments";

export const CROSSOVER_HOW =
  "by formula, the context × batch at which the work model's K/V bytes per step equal its weight bytes; measured, " +
  "the context at which the step's median time reaches twice its weights' time — the time at context 0, extrapolated " +
  "from the two shortest contexts — interpolated between the contexts measured; where each step was paired with a read " +
  "pass of the memory (the CPU), each context's time is taken at the shortest one's read rate (its bytes at that rate × " +
  "its steps' median over their own floors); none where the run does not reach it, where the shortest context is already " +
  "past it (only the extrapolation would place it), or where the two shortest contexts' times extrapolate to no positive " +
  "time at context 0 (their difference is noise, not the cache's growth).";

/** `largestContext`: the model's own (its positions less the one a step writes), which a crossover may be past. */
export function buildKvHeads(
  points: InterventionPoint[],
  together: boolean,
  largestContext: number,
): KvHeadsSection | null {
  const variants = [...new Set(points.map((p) => p.kv_heads))].sort((a, b) => b - a);
  if (variants.length < 2) return null;
  const reference = variants[0]!;
  const context = Math.max(...points.map((p) => p.context));
  const savings = points
    .filter((p) => p.context === context && p.kv_heads !== reference)
    .flatMap((p) => {
      const ref = points.find(
        (r) => r.context === context && r.kv_heads === reference && storageKey(r) === storageKey(p),
      );
      if (!ref) return [];
      const [referenceMs, stepMs] = atOneReadRate([ref, p]).map(([, ms]) => ms) as [number, number];
      const saved = 1 - stepMs / referenceMs;
      const formula = 1 - p.work.bytes / ref.work.bytes;
      return [
        {
          kv_heads: p.kv_heads,
          dtype: p.dtype,
          kv_dtype: p.kv_dtype,
          batch: p.batch,
          context,
          reference_kv_heads: reference,
          step_ms: stepMs,
          reference_ms: referenceMs,
          saved,
          formula_saved: formula,
          saved_over_formula: formula > 0 ? saved / formula : null,
        },
      ];
    });
  const series = new Map<string, InterventionPoint[]>();
  for (const p of points) {
    const key = `${p.kv_heads} ${storageKey(p)}`;
    series.set(key, [...(series.get(key) ?? []), p]);
  }
  const crossovers = [...series.values()].map((run) => {
    const sorted = [...run].sort((a, b) => a.context - b.context);
    const last = sorted[sorted.length - 1]!;
    const formula = formulaCrossover(last);
    return {
      kv_heads: last.kv_heads,
      dtype: last.dtype,
      kv_dtype: last.kv_dtype,
      batch: last.batch,
      formula_context: formula,
      within_run: formula <= last.context,
      measured_context: measuredCrossover(atOneReadRate(sorted)),
    };
  });
  return {
    variants,
    timed_together: together,
    savings,
    crossovers,
    crossover_how: CROSSOVER_HOW,
    verdict: kvHeadsVerdict(context, reference, savings, crossovers, largestContext),
  };
}

/**
 * A series' step times (by context, or a reference variant's and another's) at one memory read rate, the first
 * point's, where every point's steps were paired with read passes: each its bytes at that rate × its steps' median
 * over their own floors. The points are timed at different moments (variants that do not fit in memory together one
 * after another), and a shared host's memory can be 1.8× faster at one than at another.
 */
export function atOneReadRate(series: readonly InterventionPoint[]): [number, number][] {
  if (!pairedWithReads(series)) return series.map((p) => [p.context, p.step_ms.median]);
  const rate = series[0]!.read_bytes_per_s!;
  return series.map((p) => [p.context, stepMsAtRate(p, rate)]);
}

/** A paired point's step (ms) had the memory read at `rate` B/s: its bytes at that rate × its steps' median over their own floors. */
export const stepMsAtRate = (p: InterventionPoint, rate: number) => ((p.over_floor * p.work.bytes) / rate) * 1e3;

/** Whether every point's steps were paired with read passes of the memory (the CPU's). */
export const pairedWithReads = (points: readonly InterventionPoint[]) =>
  points.length > 0 && points.every((p) => p.read_bytes_per_s != null);

/**
 * The positions of cache at which its K/V bytes equal the weight bytes (as `bun run kv` counts the crossover), from
 * the work model's at the point's context: a cached step at context c moves c + 2 rows of K and V per layer and
 * sequence (reads positions 0…c, writes c), so one position's bytes are kv_bytes / (c + 2) at any c.
 */
export const formulaCrossover = (p: Pick<InterventionPoint, "context" | "work">) =>
  ((p.context + 2) * p.work.weight_bytes) / p.work.kv_bytes;

/**
 * Where the step reaches twice its time at context 0: that time extrapolated along the line through the two
 * shortest contexts (at most the shortest's time), the crossing interpolated between neighbouring contexts. None
 * where that line has no positive time at context 0 (the two times grew faster than any cache can make them), and
 * none before the shortest context, where only the extrapolation would place it.
 */
export function measuredCrossover(steps: readonly (readonly [number, number])[]): number | null {
  if (steps.length < 2) return null;
  const [[c1, t1], [c2, t2]] = steps as [[number, number], [number, number]];
  const slope = (t2 - t1) / (c2 - c1);
  const intercept = t1 - slope * c1;
  if (intercept <= 0) return null;
  const atZero = Math.min(t1, intercept);
  const target = 2 * atZero;
  const line: (readonly [number, number])[] = [[0, atZero], ...steps];
  // before the shortest context the crossing would be the extrapolation's, not a measurement's
  if (t1 > target) return null;
  for (let i = 2; i < line.length; i++) {
    const [ca, ta] = line[i - 1]!;
    const [cb, tb] = line[i]!;
    if (tb >= target) return ca + ((target - ta) * (cb - ca)) / (tb - ta);
  }
  return null;
}

const tokens = (n: number) => (n >= 1000 ? `${(n / 1000).toFixed(1)}k` : `${Math.round(n)}`);
const heads = (n: number) => `${n} K/V head${n === 1 ? "" : "s"}`;

/** The savings of the first storage types and batch, then every batch's crossovers in those storage types. */
function kvHeadsVerdict(
  context: number,
  reference: number,
  savings: KvHeadsSection["savings"],
  crossovers: KvHeadsSection["crossovers"],
  largestContext: number,
): string {
  const first = savings[0];
  if (!first) return `K/V heads at context ${context}: no variant shares a configuration with ${heads(reference)}.`;
  const saved = savings
    .filter((s) => storageKey(s) === storageKey(first))
    .map((s) => `${heads(s.kv_heads)} saved ${pct(s.saved)} of the step (the bytes: ${pct(s.formula_saved)})`);
  const same = crossovers.filter((c) => c.dtype === first.dtype && c.kv_dtype === first.kv_dtype);
  const batches = [...new Set(same.map((c) => c.batch))];
  const crossed = batches.map(
    (b) =>
      `at batch ${b}, ` +
      same
        .filter((c) => c.batch === b)
        .map(
          (c) =>
            `${heads(c.kv_heads)} at ${tokens(c.formula_context)} tokens by the bytes` +
            (c.measured_context !== null
              ? ` (${tokens(c.measured_context)} measured)`
              : pastModel(c.formula_context, largestContext) || " (not measured in the run)"),
        )
        .join(", "),
  );
  return (
    `K/V heads at context ${context} (batch ${first.batch}, weights ${first.dtype}, cache ${first.kv_dtype}): against ${heads(reference)}, ` +
    `${saved.join("; ")}. The cache's read equals the weights' ${crossed.join("; ")}.`
  );
}
