// From the interventions' samples to summary.json's `interventions` section: per configuration (storage types,
// batch, K/V heads) and context the time per step and per token against the bytes and FLOPs the step moves, the
// attribution of the cached step's time to launch mode, bytes and batch, measured, and GQA's saving
// (kv-heads-summary.ts).
import { peaksBeside, type Peaks } from "../backends/instrument.ts";
import { largestContextOf, withKvHeads, type ModelConfig } from "../model/architectures.ts";
import type { DtypeName } from "../ops.ts";
import type { InterventionsResult } from "./interventions.ts";
import { buildKvHeads } from "./kv-heads-summary.ts";
import { pointFloor } from "./memory-floor.ts";
import type { Attribution, InterventionPoint, InterventionsSection, StudyPoint } from "./types.ts";
import { atReferenceRate, LARGE_SAVING, NOISE, pairedOverFloor, pct } from "./verdicts.ts";
import { cachedStepWork, sumWork } from "./work-model.ts";

/** Time within this share of the bytes ratio: the step's time follows its bytes. */
const FOLLOWS_BYTES = 0.8;
/** A batch step that costs under this × a single step reads the weights once for all sequences. */
const CHEAP_BATCH = 0.5;

const ratio = (x: number) => `${x.toFixed(x >= 10 ? 0 : 2)}×`;

export function buildInterventions(
  cfg: ModelConfig,
  result: InterventionsResult,
  mode: string,
  peaks: Peaks,
  studyPoints: StudyPoint[],
  method: string,
  base: { dtype: DtypeName; kv: DtypeName; kv_heads: number },
): InterventionsSection {
  const points = result.samples.map(({ form: p, kv_heads, context, fill, step_ms, paired }): InterventionPoint => {
    const work = sumWork(cachedStepWork(withKvHeads(cfg, kv_heads), context, p));
    const floor = pointFloor(paired, work.bytes, peaks.bytes_per_s);
    const beside = peaksBeside(peaks, floor.read_bytes_per_s);
    const s = step_ms.median / 1e3;
    const flops_per_s = work.flops / s,
      bytes_per_s = work.bytes / s;
    const intensity = work.flops / work.bytes;
    return {
      dtype: p.weights,
      kv_dtype: p.kv,
      batch: p.batch,
      kv_heads,
      context,
      fill,
      step_ms,
      token_ms: step_ms.median / p.batch,
      work,
      bytes_per_token: work.bytes / p.batch,
      intensity,
      achieved: {
        flops_per_s,
        bytes_per_s,
        flops_share: flops_per_s / peaks.flops_per_s,
        bytes_share: bytes_per_s / beside.bytes_per_s,
        regime: intensity > balance(beside) ? "compute-bound" : "memory-bound",
      },
      ...floor,
    };
  });
  const configs = [
    ...new Map(
      points.map((p) => [
        `${p.dtype}/${p.kv_dtype}/${p.batch}/${p.kv_heads}`,
        { dtype: p.dtype, kv_dtype: p.kv_dtype, batch: p.batch, kv_heads: p.kv_heads },
      ]),
    ).values(),
  ];
  return {
    mode,
    method,
    configs,
    points,
    balance_flop_per_byte: balance(peaks),
    attribution: attribute(attributed(points, base.kv_heads), studyPoints, base, peaks),
    kv_heads: buildKvHeads(points, result.together, largestContextOf(cfg)),
  };
}

/** The points the attribution weighs: the model's own K/V heads where they were timed, else the variant with the most. */
function attributed(points: InterventionPoint[], own: number): InterventionPoint[] {
  const heads = points.some((p) => p.kv_heads === own) ? own : Math.max(...points.map((p) => p.kv_heads));
  return points.filter((p) => p.kv_heads === heads);
}

/** The machine's measured peak FLOP/s over peak B/s. */
const balance = (peaks: Peaks) => peaks.flops_per_s / peaks.bytes_per_s;

/**
 * At the largest context measured: what changing the launch mode did (eager against the fastest other mode of the
 * study's own points, even where eager was the fastest; paired steps at eager's read rate), what changing the bytes
 * did (the study's storage type against the fewest-bytes one, batch 1; where the study's is the fewest, the
 * most-bytes one against it), what batching did (the largest batch against 1, the study's storage type) — and a
 * sentence weighing the three.
 */
function attribute(
  points: InterventionPoint[],
  studyPoints: StudyPoint[],
  base: { dtype: DtypeName; kv: DtypeName },
  peaks: Peaks,
): Attribution {
  const context = Math.max(...points.map((p) => p.context));
  const at = (dtype: DtypeName, kv: DtypeName, batch: number) =>
    points.find((p) => p.context === context && p.dtype === dtype && p.kv_dtype === kv && p.batch === batch);
  const reference = at(base.dtype, base.kv, 1);

  const cached = studyPoints.filter((p) => p.context === context && p.mode !== "uncached");
  const eager = cached.find((p) => p.mode === "eager");
  const atEagersRate = (p: StudyPoint) =>
    eager
      ? atReferenceRate(eager.device_ms.median, pairedOverFloor(eager), p.device_ms.median, pairedOverFloor(p))
      : p.device_ms.median;
  const other = cached.filter((p) => p.mode !== "eager").sort((a, b) => atEagersRate(a) - atEagersRate(b))[0];
  const launch =
    eager && other
      ? {
          mode: other.mode,
          eager_ms: eager.device_ms.median,
          mode_ms: atEagersRate(other),
          change: 1 - atEagersRate(other) / eager.device_ms.median,
        }
      : null;

  // the storage types at batch 1 by bytes: the study's own against the fewest, or the most against it where it is
  const byBytes = points
    .filter((p) => p.context === context && p.batch === 1)
    .sort((a, b) => a.work.bytes - b.work.bytes);
  const narrowest = byBytes[0];
  const [wide, narrow] = narrowest === reference ? [byBytes[byBytes.length - 1], reference] : [reference, narrowest];
  const bytes =
    wide && narrow && wide.work.bytes > narrow.work.bytes
      ? {
          from: wide.dtype,
          to: narrow.dtype,
          bytes_ratio: wide.work.bytes / narrow.work.bytes,
          time_ratio: wide.step_ms.median / narrow.step_ms.median,
        }
      : null;

  const batches = points
    .filter((p) => p.context === context && p.dtype === base.dtype && p.kv_dtype === base.kv)
    .sort((a, b) => a.batch - b.batch);
  const widest = batches[batches.length - 1];
  const computeBound = batches.find((p) => p.intensity > balance(peaks));
  const batch =
    reference && widest && widest.batch > 1
      ? {
          batch: widest.batch,
          step_ratio: widest.step_ms.median / reference.step_ms.median,
          token_ratio: widest.token_ms / reference.token_ms,
          compute_bound_from: computeBound?.batch ?? null,
        }
      : null;
  // the launch mode's step is taken at eager's read rate where both were paired with read passes (atEagersRate)
  const rescaled = !!eager && !!other && pairedOverFloor(eager) !== null && pairedOverFloor(other) !== null;
  return { context, launch, bytes, batch, verdict: attributionVerdict(context, launch, bytes, batch, rescaled) };
}

/** What a launch mode did to eager's step, in words: within the noise, a saving, or a cost. */
function launchEffect(change: number): string {
  if (Math.abs(change) < NOISE) return `changed it by less than ${pct(NOISE)}`;
  return change > 0 ? `saved ${pct(change)}` : `cost ${pct(-change)} more`;
}

export function attributionVerdict(
  context: number,
  launch: Attribution["launch"],
  bytes: Attribution["bytes"],
  batch: Attribution["batch"],
  /** the launch mode's step taken at eager's memory read rate (said, since the table shows it as measured) */
  launchAtEagersRate = false,
): string {
  const parts: string[] = [];
  if (bytes) {
    parts.push(
      `${bytes.to} ${bytes.bytes_ratio >= 1.9 ? "halved" : `cut by ${ratio(bytes.bytes_ratio)}`} the bytes per step and cut the step ${ratio(bytes.time_ratio)}`,
    );
  }
  if (launch)
    parts.push(
      `${launch.mode} instead of eager ${launchEffect(launch.change)}${launchAtEagersRate ? " (its step at eager's memory read rate)" : ""}`,
    );
  if (batch) {
    parts.push(
      `batch ${batch.batch} cost ${ratio(batch.step_ratio)} a single step (${ratio(batch.token_ratio)} per token)` +
        (batch.compute_bound_from === null
          ? ""
          : `, compute-bound by the work model from batch ${batch.compute_bound_from}`),
    );
  }
  if (!parts.length)
    return `Attribution at context ${context}: nothing to weigh (it weighs storage types of different bytes at batch 1, a batch against batch 1, and eager against another launch mode).`;
  const followsBytes = bytes === null ? null : bytes.time_ratio >= FOLLOWS_BYTES * bytes.bytes_ratio;
  const launchLarge = launch !== null && launch.change >= LARGE_SAVING;
  const batchCheap = batch === null ? null : batch.step_ratio < CHEAP_BATCH * batch.batch;
  const conclusion = launchLarge
    ? `launch overhead is a large part of the floor${followsBytes ? ", and the rest follows the bytes" : ""}`
    : followsBytes === true
      ? "the floor is weight traffic"
      : followsBytes === false
        ? "the bytes do not explain the time: look at the kernels"
        : batchCheap === true
          ? "the weights are read once for every sequence and the step barely grows: it is bound by bytes, not FLOPs"
          : [launch && "launch overhead is not a large part of the floor", batch && batchShortfall(batch)]
              .filter(Boolean)
              .join(", and ");
  return `Attribution at context ${context}: ${parts.join("; ")}: ${conclusion}.`;
}

/** A batch that did not read the weights once for all its sequences: what it did to the cost per token. */
function batchShortfall(batch: NonNullable<Attribution["batch"]>): string {
  if (batch.token_ratio >= 1 - NOISE) return "batching did not lower the cost per token";
  return (
    `batching cut the cost per token to ${ratio(batch.token_ratio)}, short of the ${ratio(1 / batch.batch)} of a step ` +
    `that reads its weights once for all ${batch.batch} sequences`
  );
}
