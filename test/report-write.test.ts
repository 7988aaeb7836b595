import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { XMLValidator } from "fast-xml-parser";
import { validateSummary } from "../src/report/schema.ts";
import { validateTrace } from "../src/report/trace.ts";
import type { InterventionsSection, PromptCacheSection } from "../src/profile/types.ts";
import { bestCachedMs } from "../src/profile/verdicts.ts";
import { summarize } from "../src/stats.ts";
import { breakdownChart, kvHeadsChart, latencyChart, promptCacheChart, trafficChart } from "../src/report/charts.ts";
import { captionLines } from "../src/report/svg.ts";
import { renderReport } from "../src/report/markdown.ts";
import { kvHeadsLead, kvHeadsTable } from "../src/report/sections.ts";
import { writeProfileOutputs } from "../src/report/write.ts";
import { SAVING_AT_ONE_READ_RATE } from "../src/profile/kv-heads-summary.ts";
import { syntheticSteps, syntheticSummary } from "./helpers/synthetic-profile.ts";

const dir = mkdtempSync(join(tmpdir(), "decode-floor-write-"));

/** The files report.md's Files section lists as the plots. */
const plotsListed = (report: string) =>
  [...(report.split("\n").find((l) => l.endsWith(": the plots")) ?? "").matchAll(/\[([^\]]+)\]/g)].map((m) => m[1]);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("writeProfileOutputs", () => {
  const steps = syntheticSteps();
  const summary = syntheticSummary(steps);
  const written = writeProfileOutputs(join(dir, "run"), summary, steps);
  const paths = written.paths;
  const read = (name: string) => readFileSync(join(dir, "run", name), "utf8");

  test("writes the seven files and returns their paths: no K/V-head or prompt-cache chart without their sections", () => {
    expect(paths.map((p) => basename(p))).toEqual([
      "summary.json",
      "kernels.csv",
      "trace.json",
      "latency.svg",
      "breakdown.svg",
      "traffic.svg",
      "report.md",
    ]);
  });

  test("summary.json round-trips and validates", () => {
    expect(written.summaryProblems).toEqual([]);
    expect(written.traceProblems).toEqual([]);
    const parsed = JSON.parse(read("summary.json"));
    expect(parsed).toEqual(summary);
    expect(validateSummary(parsed)).toEqual([]);
  });

  test("trace.json validates", () => {
    expect(validateTrace(JSON.parse(read("trace.json")))).toEqual([]);
  });

  test("the SVGs are valid XML and carry every mode", () => {
    for (const name of ["latency.svg", "breakdown.svg", "traffic.svg"])
      expect(XMLValidator.validate(read(name))).toBe(true);
    for (const label of ["no cache", "KV cache eager", "KV cache graph"])
      expect(read("latency.svg")).toContain(`>${label}</text>`);
    expect(read("breakdown.svg")).toContain(">device idle</text>");
  });

  test("kernels.csv and report.md are there, linking the rest", () => {
    expect(read("kernels.csv")).toStartWith("Time (%),Total Time (ns)");
    const report = read("report.md");
    for (const name of ["summary.json", "trace.json", "kernels.csv", "latency.svg", "breakdown.svg", "traffic.svg"])
      expect(report).toContain(`(${name})`);
    for (const name of ["kv-heads.svg", "prompt-cache.svg"]) expect(report).not.toContain(`(${name})`);
    expect(plotsListed(report)).toEqual(paths.map((p) => basename(p)).filter((n) => n.endsWith(".svg")));
  });

  test("returns the problems of an invalid summary and of a broken trace, the files written all the same", () => {
    const broken = { ...summary, date: "yesterday" };
    const brokenStep = {
      ...steps[0]!,
      ops: steps[0]!.ops.map((o, i) => (i === 0 ? { ...o, end_us: o.start_us - 1 } : o)),
    };
    const w = writeProfileOutputs(join(dir, "broken"), broken, [brokenStep, ...steps.slice(1)]);
    expect(w.summaryProblems).toContain(`summary.json /date: must match format "date-time"`);
    expect(w.traceProblems.length).toBeGreaterThan(0);
    expect(readFileSync(join(dir, "broken", "report.md"), "utf8")).toContain("# Decode-floor profile");
  });
});

describe("charts from a summary", () => {
  test("context 0 is left off the log axis and said so", () => {
    const s = syntheticSummary();
    s.points.push({ ...s.points[0]!, context: 0 });
    const svg = latencyChart(s);
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg).toContain("context 0 not shown");
  });

  test("modes without a breakdown get a single 'not traced' bar", () => {
    const s = syntheticSummary();
    for (const p of s.points) if (p.mode === "graph") delete p.breakdown;
    const svg = breakdownChart(s);
    expect(svg).toContain(">KV cache graph @ 32</text>");
    expect(svg).toContain(">not traced (total)</text>");
    // its bars are traced steps, not the time-per-token table's untraced medians
    expect(svg).toContain("traced step (ms; untraced where labelled)");
  });
});

describe("report.md of a run without traced steps", () => {
  test("says nothing was traced where the split, the top operations and the regimes would be, with no empty table", () => {
    const s = syntheticSummary();
    s.settings.kernels = false;
    s.regimes = [];
    for (const p of s.points) {
      delete p.breakdown;
      delete p.split;
    }
    const md = renderReport(s);
    expect(md).toContain("_No step was traced in this run (--no-kernels): no split of a step");
    expect(md).toContain("_No step was traced in this run (--no-kernels): no per-operation times._");
    expect(md).toContain("_No step was traced in this run (--no-kernels): no per-kernel regimes._");
    expect(md).not.toContain("| device busy (ms) |");
  });
});

/** The numbers a chart drew: every circle's centre and every bar's hover title, in document order. */
const titles = (svg: string) => [...svg.matchAll(/<title>([^<]*)<\/title><\/rect>/g)].map((m) => m[1]!);
const stats = (median: number) => summarize([median, median, median]);

describe("captionLines", () => {
  test("breaks after a separator where a line would pass its width, never inside a part", () => {
    const parts = [
      "host (CPU)",
      "device",
      "2026-12-04T04:21:20.681Z",
      `crossovers beyond the run: ${"9h b1 11.7k, ".repeat(8)}`,
    ];
    const lines = captionLines(parts.join(" · "));
    expect(lines).toEqual(["host (CPU) · device · 2026-12-04T04:21:20.681Z", parts[3]!]);
    expect(captionLines("one · two")).toEqual(["one · two"]);
    const long = "x".repeat(200);
    expect(captionLines(`a · ${long}`)).toEqual(["a", long]);
  });
});

describe("long-context charts", () => {
  test("traffic: one bar per context, the fastest cached step split by the K/V cache's share of the bytes", () => {
    const s = syntheticSummary();
    const svg = trafficChart(s);
    expect(XMLValidator.validate(svg)).toBe(true);
    const expected = s.seed_table.flatMap((r) => {
      const ms = bestCachedMs(r)!;
      const label = r.context.toLocaleString("en-US");
      return [
        `${label}: weights and activations ${Number.parseFloat((ms * (1 - r.kv_byte_share)).toPrecision(6))}`,
        `${label}: K/V cache ${Number.parseFloat((ms * r.kv_byte_share).toPrecision(6))}`,
      ];
    });
    expect(titles(svg)).toEqual(expected);
    // the cache's share grows with the context: its segment is a larger part of the longer context's bar
    const [short, long] = [s.seed_table[0]!, s.seed_table.at(-1)!];
    expect(long.kv_byte_share).toBeGreaterThan(short.kv_byte_share);
  });

  /** Three K/V-head variants at batch 1 and 4; only the fields the chart reads are real. */
  function withKvHeads(): ReturnType<typeof syntheticSummary> {
    const s = syntheticSummary();
    const configs = [9, 3, 1].flatMap((kv_heads) =>
      [1, 4].map((batch) => ({ dtype: "f32" as const, kv_dtype: "f32" as const, batch, kv_heads })),
    );
    const points = configs.flatMap((c) =>
      [256, 2048, 8192].map((context) => ({
        ...c,
        context,
        step_ms: stats(10 + (c.batch * c.kv_heads * context) / 1000),
      })),
    );
    const crossover = (kv_heads: number, batch: number, formula_context: number, measured_context: number | null) => ({
      dtype: "f32" as const,
      kv_dtype: "f32" as const,
      kv_heads,
      batch,
      formula_context,
      within_run: formula_context <= 8192,
      measured_context,
    });
    s.interventions = {
      mode: "eager",
      configs,
      points,
      kv_heads: {
        variants: [9, 3, 1],
        timed_together: true,
        savings: [],
        crossovers: [
          crossover(9, 1, 4300, 3200),
          crossover(9, 4, 1100, 900),
          crossover(3, 1, 11700, null),
          crossover(3, 4, 2900, 3100),
          crossover(1, 1, 35100, null),
          crossover(1, 4, 8800, null),
        ],
        crossover_how: "",
        verdict: "",
      },
    } as unknown as InterventionsSection;
    return s;
  }

  test("K/V heads: the report says the savings are at one read rate only where every step was paired with a read pass", () => {
    const s = withKvHeads();
    const interventions = s.interventions!;
    /** the summary with every intervention point's steps paired with passes reading `read` (null: unpaired) */
    const pairedAt = (read: number | null) => ({
      ...s,
      interventions: { ...interventions, points: interventions.points.map((p) => ({ ...p, read_bytes_per_s: read })) },
    });
    expect(kvHeadsLead(pairedAt(60e9))).toContain(SAVING_AT_ONE_READ_RATE);
    expect(kvHeadsLead(pairedAt(null))).not.toContain(SAVING_AT_ONE_READ_RATE);
    // and the table's step column says so too
    expect(kvHeadsTable(pairedAt(60e9)).columns[3]!.header).toBe("step at -, at one read rate (ms)");
    expect(kvHeadsTable(pairedAt(null)).columns[3]!.header).toBe("step at - (ms)");
  });

  test("K/V heads: the reference row shows its own step, which the savings are against", () => {
    const s = withKvHeads();
    const saving = (kv_heads: number, batch: number, reference_ms: number) => ({
      dtype: "f32" as const,
      kv_dtype: "f32" as const,
      kv_heads,
      batch,
      context: 8192,
      reference_kv_heads: 9,
      step_ms: reference_ms / 2,
      reference_ms,
      saved: 0.5,
      formula_saved: 0.5,
      saved_over_formula: 1,
    });
    s.interventions!.kv_heads!.savings = [saving(3, 1, 25.5), saving(1, 1, 25.5), saving(3, 4, 61.25)];
    const rows = kvHeadsTable(s).rows;
    const stepOf = (kv: number, batch: number) => rows.find((r) => r[0] === kv && r[2] === batch)![3];
    expect(stepOf(9, 1)).toBe("25.500 (reference)");
    expect(stepOf(9, 4)).toBe("61.250 (reference)");
    expect(stepOf(3, 1)).toBe("12.750");
  });

  test("K/V heads: a line per variant, crossovers measured solid and by the bytes dotted, those beyond the run listed", () => {
    const svg = kvHeadsChart(withKvHeads())!;
    expect(XMLValidator.validate(svg)).toBe(true);
    for (const kv of [9, 3, 1])
      for (const batch of [1, 4])
        expect(svg).toContain(`>${kv} K/V head${kv === 1 ? "" : "s"} · batch ${batch}</text>`);
    expect(svg.match(/<g class="series">/g)).toHaveLength(6);
    const markers = [
      ...svg.matchAll(/<g class="marker">\n<line [^>]*?( stroke-dasharray="2 3")?\/>\n<text [^>]*>([^<]*)<\/text>/g),
    ].map((m) => `${m[2]} ${m[1] ? "dotted" : "solid"}`);
    // in order of context, one label row each
    expect(markers).toEqual([
      "9h b4 900 solid",
      "9h b4 1.1k dotted",
      "3h b4 2.9k dotted",
      "3h b4 3.1k solid",
      "9h b1 3.2k solid",
      "9h b1 4.3k dotted",
    ]);
    expect(svg).toContain("crossovers beyond the run, by the bytes: 3h b1 11.7k, 1h b1 35.1k, 1h b4 8.8k");
    expect(svg).toContain(">crossover measured</text>");
    expect(kvHeadsChart(syntheticSummary())).toBeNull();
  });

  test("K/V heads: paired steps are drawn at one read rate, as their crossovers are measured", () => {
    const s = withKvHeads();
    const interventions = s.interventions!;
    const polylines = (svg: string) => [...svg.matchAll(/<polyline points="([^"]*)"/g)].map((m) => m[1]);
    // the 3-head variant timed while the memory read at half the rate: twice its time, its floor twice as long
    const paired = {
      ...s,
      interventions: {
        ...interventions,
        points: interventions.points.map((p) => {
          const slow = p.kv_heads === 3 ? 2 : 1;
          return {
            ...p,
            step_ms: stats(p.step_ms.median * slow),
            read_bytes_per_s: 60e9 / slow,
            over_floor: 1,
            work: { ...p.work, bytes: (60e9 * p.step_ms.median) / 1e3 },
          };
        }),
      },
    };
    const svg = kvHeadsChart(paired)!;
    expect(polylines(svg)).toEqual(polylines(kvHeadsChart(s)!));
    expect(svg).toContain(">median step time at one read rate, 60.0 GB/s (ms, eager)</text>");
    expect(kvHeadsChart(s)!).toContain(">median step time (ms, eager)</text>");
  });

  test("prompt cache: cold, warm from memory and warm from a file against the prefix", () => {
    const s = syntheticSummary();
    expect(promptCacheChart(s)).toBeNull();
    s.prompt_cache = {
      suffix_tokens: 16,
      new_tokens: 8,
      repeats: 3,
      how: "",
      points: [1024, 2048, 4096].map((prefix_tokens) => ({
        prefix_tokens,
        bytes_kept: prefix_tokens * 46080,
        file_bytes: prefix_tokens * 46080 + 512,
        cold_ttft_ms: stats(prefix_tokens),
        warm_memory_ttft_ms: stats(prefix_tokens / 20),
        warm_file_ttft_ms: stats(prefix_tokens / 18),
        streams_identical: true,
      })),
    } satisfies PromptCacheSection;
    const svg = promptCacheChart(s)!;
    expect(XMLValidator.validate(svg)).toBe(true);
    for (const name of ["cold: all prefilled", "warm: from memory", "warm: from a file"])
      expect(svg).toContain(`>${name}</text>`);
    expect(svg.match(/<circle /g)).toHaveLength(9);
    expect(svg).toContain("then 16 new prompt tokens");
  });
});
