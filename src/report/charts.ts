// The profile's SVG charts, drawn from a ProfileSummary alone: time per token against context, where a
// step's time goes by operation and by the bytes it reads, and, where the run measured them, the K/V-head
// variants with their crossovers and time to first token cold against a kept prefix.
import { pairedWithReads, stepMsAtRate } from "../profile/kv-heads-summary.ts";
import type { InterventionPoint, ProfileSummary, PromptCachePoint } from "../profile/types.ts";
import { bestCachedMs } from "../profile/verdicts.ts";
import { breakdownPoints, modeLabel } from "./sections.ts";
import { lineChart, stackedBars, type BarSegment, type LineSeries, type XMarker } from "./svg.ts";

function caption(s: ProfileSummary, note = ""): string {
  return `${s.machine.hostname} (${s.machine.cpu}) · ${s.device.name} · ${s.date}${note}`;
}

/** Contexts on a log axis must be positive. */
const onAxis = (context: number) => context > 0;

/** 11,700 → "11.7k": a crossover's context in a label. */
function tokens(n: number): string {
  return n >= 1000 ? `${(n / 1000).toFixed(1)}k` : Math.round(n).toString();
}

/** Median time per token against context, one line per mode, and the FLOP ratio on a second axis. */
export function latencyChart(s: ProfileSummary): string {
  const series: LineSeries[] = s.settings.modes
    .map((mode) => ({
      name: modeLabel(mode),
      points: s.points
        .filter((p) => p.mode === mode && onAxis(p.context))
        .map((p) => ({ x: p.context, y: p.device_ms.median })),
    }))
    .filter((line) => line.points.length > 0);
  // the peers beside them, dotted: the same contexts, the same weights, the same run
  for (const r of s.peers?.results ?? []) {
    const points = r.points.filter((p) => onAxis(p.context)).map((p) => ({ x: p.context, y: p.ms.median }));
    if (points.length) series.push({ name: r.short, points, dotted: true });
  }
  series.push({
    name: "FLOP ratio (right axis)",
    axis: "right",
    points: s.seed_table.filter((r) => onAxis(r.context)).map((r) => ({ x: r.context, y: r.flop_reduction })),
  });
  const dropped = s.points.some((p) => !onAxis(p.context)) ? " · context 0 not shown (log axis)" : "";
  return lineChart({
    title: `Decode step time per token vs context: ${s.model.config.name}`,
    xTitle: "context (tokens already in the sequence, log2 scale)",
    yTitle: "median device time per token (ms, log scale)",
    yLog: true,
    y2Title: "FLOP ratio, no cache / KV cache (×)",
    series,
    caption: caption(s, dropped),
  });
}

/**
 * One bar per mode at its largest traced context: its traced step by op family (op timers on, so not the time-per-token
 * table's untraced median), plus the device's idle time; an untraced mode's median beside them, labelled so.
 */
export function breakdownChart(s: ProfileSummary): string {
  const traced = breakdownPoints(s);
  const bars = traced.map((p) => {
    const segments: BarSegment[] = p.breakdown.families.map((f) => ({
      key: f.key,
      value: f.share * p.breakdown.op_sum_ms,
    }));
    if (p.split) segments.push({ key: "device idle", value: Math.max(0, p.split.idle_ms) });
    return { label: `${modeLabel(p.mode)} @ ${p.context}`, segments };
  });
  const untraced = s.points
    .filter((p) => !traced.some((t) => t.mode === p.mode))
    .filter((p, _, all) => p.context === Math.max(...all.filter((q) => q.mode === p.mode).map((q) => q.context)))
    .map((p) => ({
      label: `${modeLabel(p.mode)} @ ${p.context}`,
      segments: [{ key: "not traced (total)", value: p.device_ms.median }],
    }));
  return stackedBars({
    title: `Where a token's step goes, by operation: ${s.model.config.name}`,
    yTitle: "traced step (ms; untraced where labelled)",
    bars: [...bars, ...untraced],
    caption: caption(s),
  });
}

/**
 * One bar per context: the fastest cached mode's step split in proportion to the bytes it reads (work
 * model), the K/V cache's rows against the weights and activations: where the floor moves from one to the other.
 */
export function trafficChart(s: ProfileSummary): string {
  const bars = s.seed_table.flatMap((r) => {
    const ms = bestCachedMs(r);
    if (ms === null) return [];
    const segments: BarSegment[] = [
      { key: "weights and activations", value: ms * (1 - r.kv_byte_share) },
      { key: "K/V cache", value: ms * r.kv_byte_share },
    ];
    return [{ label: r.context.toLocaleString("en-US"), segments }];
  });
  return stackedBars({
    title: `A step's time split by the bytes it reads: ${s.model.config.name}`,
    xTitle: "context (tokens already in the sequence)",
    yTitle: "fastest cached mode, median ms per token",
    bars,
    caption: caption(s, " · split in proportion to the work model's bytes at each context"),
  });
}

/**
 * Median step time (at one read rate where paired) against context per K/V-head variant (× storage types × batch), with each crossover
 * marked: solid where the run measured it, dotted where the bytes formula puts it inside the run; the
 * formula's crossovers beyond the run are listed in the caption. Null without a K/V-head intervention.
 */
export function kvHeadsChart(s: ProfileSummary): string | null {
  const iv = s.interventions;
  const k = iv?.kv_heads;
  if (!iv || !k) return null;
  const types = new Set(iv.configs.map((c) => `${c.dtype}/${c.kv_dtype}`));
  type Config = (typeof iv.configs)[number];
  const same = (a: Config, b: Config) =>
    a.kv_heads === b.kv_heads && a.dtype === b.dtype && a.kv_dtype === b.kv_dtype && a.batch === b.batch;
  const name = (c: Config) =>
    `${c.kv_heads} K/V head${c.kv_heads === 1 ? "" : "s"} · batch ${c.batch}${types.size > 1 ? ` · ${c.dtype}/${c.kv_dtype}` : ""}`;
  // where the steps were paired with read passes, every point at one read rate, as the crossovers are measured
  // (a series' crossover does not depend on which rate); else the medians as timed
  const rate = oneReadRate(iv.points, k.variants[0]!);
  const stepMs = (p: InterventionPoint) => (rate === null ? p.step_ms.median : stepMsAtRate(p, rate));
  const drawn = iv.configs
    .map((c) => ({
      config: c,
      series: {
        name: name(c),
        points: iv.points.filter((p) => same(p, c) && onAxis(p.context)).map((p) => ({ x: p.context, y: stepMs(p) })),
      },
    }))
    .filter((d) => d.series.points.length > 0);
  const markers: XMarker[] = [];
  const beyond: string[] = [];
  for (const c of k.crossovers) {
    const index = drawn.findIndex((d) => same(d.config, c));
    if (index < 0) continue;
    const short = `${c.kv_heads}h b${c.batch}`;
    if (c.measured_context !== null && c.measured_context > 0)
      markers.push({ x: c.measured_context, label: `${short} ${tokens(c.measured_context)}`, series: index });
    if (c.within_run)
      markers.push({
        x: c.formula_context,
        label: `${short} ${tokens(c.formula_context)}`,
        series: index,
        dotted: true,
      });
    else beyond.push(`${short} ${tokens(c.formula_context)}`);
  }
  const note = beyond.length > 0 ? ` · crossovers beyond the run, by the bytes: ${beyond.join(", ")}` : "";
  return lineChart({
    title: `Step time vs context per K/V-head variant: ${s.model.config.name}`,
    xTitle: "context (tokens already in each sequence, log2 scale)",
    yTitle:
      rate === null
        ? `median step time (ms, ${iv.mode})`
        : `median step time at one read rate, ${(rate / 1e9).toFixed(1)} GB/s (ms, ${iv.mode})`,
    series: drawn.map((d) => d.series),
    markers,
    markerLegend: { solid: "crossover measured", dotted: "crossover by the bytes" },
    caption: caption(s, note),
  });
}

/**
 * The read rate a chart's paired points are all taken at: that of the most heads' first point at the largest
 * context. Null where some point's steps were not paired with read passes (a GPU's).
 */
function oneReadRate(points: readonly InterventionPoint[], mostHeads: number): number | null {
  if (!pairedWithReads(points)) return null;
  const largest = Math.max(...points.map((p) => p.context));
  return points.find((p) => p.kv_heads === mostHeads && p.context === largest)!.read_bytes_per_s!;
}

/** Time to first token against the prefix kept, cold and warm (from memory, from a file). Null where no prefix was timed. */
export function promptCacheChart(s: ProfileSummary): string | null {
  const c = s.prompt_cache;
  if (!c) return null;
  const points = c.points;
  const line = (name: string, ttft: (p: PromptCachePoint) => number): LineSeries => ({
    name,
    points: points.map((p) => ({ x: p.prefix_tokens, y: ttft(p) })),
  });
  return lineChart({
    title: `Time to first token, cold and with a kept prefix: ${s.model.config.name}`,
    xTitle: `prefix tokens (log2 scale), then ${c.suffix_tokens} new prompt tokens`,
    yTitle: "median time to first token (ms, log scale)",
    yLog: true,
    series: [
      line("cold: all prefilled", (p) => p.cold_ttft_ms.median),
      line("warm: from memory", (p) => p.warm_memory_ttft_ms.median),
      line("warm: from a file", (p) => p.warm_file_ttft_ms.median),
    ],
    caption: caption(s, ` · ${c.repeats} starts each`),
  });
}
