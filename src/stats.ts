// Summary statistics of repeated timing samples (milliseconds in, milliseconds out).
import { max, mean, median, min, quantileSorted, sampleStandardDeviation } from "simple-statistics";

/** Summary statistics of repeated samples, in milliseconds. */
export interface Stats {
  n: number;
  median: number;
  mean: number;
  p10: number;
  p90: number;
  min: number;
  max: number;
  stddev: number;
  /** (p90 - p10) / median */
  spread: number;
}

/**
 * Median, mean, p10/p90 (linear interpolation, numpy's default), min, max, the sample standard
 * deviation (n - 1; 0 for one sample) and spread = (p90 - p10) / median (0 when the median is 0).
 */
export function summarize(samplesMs: readonly number[]): Stats {
  if (samplesMs.length === 0) throw new RangeError("summarize: no samples");
  const bad = samplesMs.find((x) => !Number.isFinite(x));
  if (bad !== undefined) throw new RangeError(`summarize: sample ${bad} is not a finite number`);
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const med = median(sorted);
  const p10 = quantileSorted(sorted, 0.1);
  const p90 = quantileSorted(sorted, 0.9);
  return {
    n: sorted.length,
    median: med,
    mean: mean(sorted),
    p10,
    p90,
    min: min(sorted),
    max: max(sorted),
    stddev: sorted.length > 1 ? sampleStandardDeviation(sorted) : 0,
    spread: med === 0 ? 0 : (p90 - p10) / med,
  };
}
