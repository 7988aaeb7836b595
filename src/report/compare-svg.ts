// The comparison's plot: median time per token against context, one line per run and mode.
import type { RunInput } from "../profile/compare.ts";
import { modeLabel } from "./sections.ts";
import { lineChart, type LineSeries } from "./svg.ts";

/** Every run's study, all its contexts (context 0 cannot go on the log axis); the caption names each run's device and date. */
export function compareChart(runs: readonly RunInput[]): string {
  const series: LineSeries[] = runs.flatMap(({ label, summary: s }) =>
    s.settings.modes
      .map((mode) => ({
        name: `${label}: ${modeLabel(mode)}`,
        points: s.points
          .filter((p) => p.mode === mode && p.context > 0)
          .map((p) => ({ x: p.context, y: p.device_ms.median })),
      }))
      .filter((line) => line.points.length > 0),
  );
  return lineChart({
    title: `Decode step time per token vs context: ${runs.map((r) => r.label).join(" vs ")}`,
    xTitle: "context (tokens already in the sequence, log2 scale)",
    yTitle: "median device time per token (ms, log scale)",
    yLog: true,
    series,
    caption: runs.map((r) => `${r.label}: ${r.summary.device.name}, ${r.summary.date.slice(0, 10)}`).join(" · "),
  });
}
