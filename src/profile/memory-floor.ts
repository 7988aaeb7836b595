// A point's time against its memory floor: its bytes (work model) at the memory's read rate. On the CPU each timed
// step is paired with a read pass taken right before it (Instrument.readPass), so the floor moves with the host's
// memory; elsewhere the peaks' rate stands for every step.
import type { PairedStep } from "../backends/instrument.ts";
import { summarize } from "../stats.ts";

export interface PointFloor {
  /** the median of the read passes beside the point's timed steps, bytes/s; null where none was taken */
  read_bytes_per_s: number | null;
  /** the median over its timed steps of the step ÷ its bytes at the pass beside it (unpaired: at one rate) */
  over_floor: number;
}

/** The floor of a point whose timed steps are `steps`, each moving `bytes`; unpaired, at `unpairedBytesPerS`. */
export function pointFloor(steps: readonly PairedStep[], bytes: number, unpairedBytesPerS: number): PointFloor {
  if (steps.length === 0) throw new RangeError("pointFloor: no timed step");
  const paired = steps.every((s) => s.read !== null);
  const overFloor = (s: PairedStep) => s.ms / ((bytes / (paired ? s.read! : unpairedBytesPerS)) * 1e3);
  return {
    read_bytes_per_s: paired ? summarize(steps.map((s) => s.read!)).median : null,
    over_floor: summarize(steps.map(overFloor)).median,
  };
}
