// biome-ignore-all lint/suspicious/noExplicitAny: summaries taken apart field by field, on purpose
// The comparison of profile runs on synthetic summaries (a faster run, one inside the noise, other models and
// plans) and on the committed version-5 profiles; the older versions' schemas derived from the current one.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import {
  compareRuns,
  type CompareTable,
  type Comparison,
  type ReadSummary,
  type RunInput,
} from "../src/profile/compare.ts";
import type { ProfileSummary } from "../src/profile/types.ts";
import { validateSummaryVersion } from "../src/report/compare-schema.ts";
import { renderCompareReport } from "../src/report/compare-markdown.ts";
import { compareChart } from "../src/report/compare-svg.ts";
import { compareTableData, renderCompareTerminal } from "../src/report/compare-tables.ts";
import type { Stats } from "../src/stats.ts";
import { ROOT } from "./helpers/cli.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

const committed = (name: string): ReadSummary =>
  JSON.parse(readFileSync(join(ROOT, "profiles", name, "summary.json"), "utf8"));
const run = (label: string, summary: ReadSummary): RunInput => ({ label, dir: `/runs/${label}`, summary });
const tableOf = (c: Comparison, section: CompareTable["section"]) => c.tables.find((t) => t.section === section);

/** Stats around `median` with p10 / p90 at ±`spread` of it. */
function statsAround(median: number, spread: number): Stats {
  const p10 = median * (1 - spread);
  const p90 = median * (1 + spread);
  return {
    n: 10,
    median,
    mean: median,
    p10,
    p90,
    min: p10,
    max: p90,
    stddev: median * spread,
    spread: (p90 - p10) / median,
  };
}

/** The synthetic summary with every point's median times `factor(mode)` of the base's and a ±`spread` interval. */
function timed(base: ProfileSummary, factor: (mode: string) => number, spread = 0.1): ProfileSummary {
  const s = structuredClone(base);
  for (const p of s.points) p.device_ms = statsAround(p.device_ms.median * factor(p.mode), spread);
  return s;
}

describe("compareRuns on synthetic summaries", () => {
  const base = timed(syntheticSummary(), () => 1);

  test("a clearly faster run is flagged faster at every point, with its ratio and the rule stated", () => {
    const c = compareRuns([
      run("A40", base),
      run(
        "H200",
        timed(base, () => 0.25),
      ),
    ]);
    const step = tableOf(c, "step")!;
    expect(step.rows.length).toBe(base.points.length);
    for (const row of step.rows) {
      expect(row.cells[0]!.change).toBe("reference");
      expect(row.cells[1]!.change).toBe("faster");
      expect(row.cells[1]!.ratio).toBeCloseTo(0.25, 9);
    }
    expect(c.rules["p10-p90"]).toMatch(/do not overlap/);
    expect(c.verdicts.join("\n")).toMatch(
      /H200 vs A40: the graph step at context 32 is 4\.00× faster \(.*p10–p90 apart\); faster at 2 of 2 contexts\./,
    );
    expect(c.not_compared).toEqual([]);
  });

  test("prompt caching: each start's time to first token, one run's warm start beyond the other's spread", () => {
    const withCache = (warm: number) => {
      const s = structuredClone(base);
      s.prompt_cache = {
        suffix_tokens: 16,
        new_tokens: 8,
        repeats: 3,
        how: "synthetic",
        points: [
          {
            prefix_tokens: 1024,
            bytes_kept: 47185920,
            file_bytes: 47192256,
            cold_ttft_ms: statsAround(950, 0.02),
            warm_memory_ttft_ms: statsAround(warm, 0.05),
            warm_file_ttft_ms: statsAround(300, 0.05),
            streams_identical: true,
          },
        ],
      };
      return s;
    };
    const c = compareRuns([run("before", withCache(70)), run("after", withCache(35))]);
    const t = tableOf(c, "prompt_cache")!;
    expect(t.rows.map((r) => [r.key, r.cells[1]!.change])).toEqual([
      [[1024, "cold"], "within noise"],
      [[1024, "warm, memory"], "faster"],
      [[1024, "warm, file"], "within noise"],
    ]);
    // a run of the version before prompt caching lacks the section, and says why
    const older = structuredClone(base) as ReadSummary;
    older.schema_version = 11;
    const gap = compareRuns([run("before", withCache(70)), run("v11", older)]);
    expect(JSON.stringify(gap.not_compared)).toContain("older than these fields (version 12)");
  });

  test("a run inside the other's spread is called within the noise", () => {
    const c = compareRuns([
      run("before", base),
      run(
        "after",
        timed(base, () => 1.03),
      ),
    ]);
    for (const row of tableOf(c, "step")!.rows) expect(row.cells[1]!.change).toBe("within noise");
    expect(c.verdicts.join("\n")).toMatch(
      /after vs before: the eager step at context 32 takes the same time within the noise \(.*1\.03×, p10–p90 overlap\)/,
    );
  });

  test("the eager-vs-graph gap that grows is said, with what it means", () => {
    const c = compareRuns([
      run("A40", base),
      run(
        "H200",
        timed(base, (m) => (m === "graph" ? 0.25 : 1)),
      ),
    ]);
    const ratio =
      base.points.find((p) => p.mode === "eager" && p.context === 32)!.device_ms.median /
      base.points.find((p) => p.mode === "graph" && p.context === 32)!.device_ms.median;
    expect(c.verdicts).toContain(
      `H200 vs A40: the eager-vs-graph gap at context 32 grew from ${ratio.toFixed(2)}× to ${(ratio * 4).toFixed(2)}×: launch overhead matters more in H200.`,
    );
  });

  test("families and the split get their point's interval scaled to them; the launch floor is compared without a spread", () => {
    const slower = timed(base, () => 1);
    slower.device.launch.host_us *= 1.5;
    const c = compareRuns([run("a", base), run("b", slower)]);
    const families = tableOf(c, "families")!;
    const cell = families.rows[0]!.cells[0]!;
    expect(cell.value.p90 / cell.value.median).toBeCloseTo(1.1, 9);
    expect(families.rule).toBe("scaled");
    const launch = tableOf(c, "launch")!;
    expect(launch.rule).toBe("none");
    const host = launch.rows.find((r) => r.key[0] === "host per empty launch")!;
    expect(host.cells[1]!.change).toBe("slower");
    expect(launch.rows.find((r) => r.key[0] === "graph node")!.cells[1]!.change).toBe("within noise");
  });

  test("traced steps that moved otherwise than the timed ones are said not to tell one story", () => {
    // the second run's timed steps 1.2× slower, its traced op time 0.75× the first's
    const apart = timed(base, () => 1.2);
    for (const p of apart.points)
      if (p.breakdown) {
        p.breakdown.op_sum_ms *= 0.75;
        for (const f of p.breakdown.families) f.total_ms *= 0.75;
      }
    const verdicts = compareRuns([run("a", base), run("b", apart)]).verdicts;
    const families = verdicts.find((v) => v.includes("by op family"))!;
    expect(families).toMatch(/The traced steps' op time moved 0\.75× where the timed steps moved 1\.20×/);
    // moved alike: nothing said
    const alike = timed(base, () => 0.8);
    for (const p of alike.points) if (p.breakdown) p.breakdown.op_sum_ms *= 0.8;
    expect(compareRuns([run("a", base), run("b", alike)]).verdicts.join(" ")).not.toContain("do not tell one story");
  });

  test("runs of another model or plan are listed as not comparable, with the difference", () => {
    const medium = structuredClone(base);
    medium.model.config = { ...medium.model.config, name: "wide", n_embd: 128 };
    medium.model.parameters *= 3;
    const fused = structuredClone(base);
    fused.settings.plan = "fused";
    const c = compareRuns([run("a", base), run("b", medium), run("c", fused)]);
    expect(tableOf(c, "step")).toBeUndefined();
    const lines = c.not_compared.map((n) => `${n.what}: ${n.why}`);
    expect(
      lines.some((l) =>
        /^Time per token.* \(wide .*\): b: no other run shares its configuration: model wide \(.* parameters\) against tiny \(.* parameters\) of a$/.test(
          l,
        ),
      ),
    ).toBe(true);
    expect(
      lines.some((l) =>
        /^Time per token.* · fused · .*\): c: no other run shares its configuration: plan fused against unfused of a$/.test(
          l,
        ),
      ),
    ).toBe(true);
    // the launch floor is the device's: every run compares there
    expect(tableOf(c, "launch")!.runs).toEqual([0, 1, 2]);
  });

  test("end-to-end rows of other lengths or modes are listed as not measured, the shared ones compared", () => {
    const longer = structuredClone(base);
    for (const e of longer.end_to_end) e.new_tokens += 8;
    const fewerModes = structuredClone(base);
    fewerModes.end_to_end = fewerModes.end_to_end.slice(0, 1);
    const c = compareRuns([run("a", base), run("b", longer), run("c", fewerModes)]);
    const kept = base.end_to_end[0]!;
    expect(tableOf(c, "end_to_end")!.rows.map((r) => r.key.slice(0, 2))).toContainEqual([
      kept.mode,
      `${kept.prompt_tokens} + ${kept.new_tokens}`,
    ]);
    const gaps = c.not_compared.filter((n) => n.what.startsWith("End-to-end generation"));
    expect(gaps.some((n) => n.why === "not measured in b")).toBe(true);
    expect(gaps.some((n) => n.why === "not measured in c")).toBe(true);
  });

  test("two runs of one configuration beside a third compare with each other, the third listed", () => {
    const other = structuredClone(base);
    other.settings.dtype = "bf16";
    const c = compareRuns([
      run("a", base),
      run("odd", other),
      run(
        "b",
        timed(base, () => 0.5),
      ),
    ]);
    expect(tableOf(c, "step")!.runs).toEqual([0, 2]);
    expect(
      c.not_compared.some((n) => n.what.includes("odd") && n.why.includes("storage bf16/f32 against f32/f32")),
    ).toBe(true);
  });

  test("predictions: measured ÷ predicted with the model's range; per-kernel rows a version-6 summary lacks are said to be newer", () => {
    const predicted = (measured_ms: number): ProfileSummary => ({
      ...base,
      predictions: {
        gpu: "H200",
        how: "synthetic",
        kernels_how: "synthetic",
        launch_parameters: [],
        points: [
          {
            mode: "graph",
            context: 32,
            dtype: "f32",
            kv_dtype: "f32",
            batch: 1,
            kv_heads: 12,
            measured_ms,
            predicted_ms: 0.1,
            optimistic_ms: 0.08,
            pessimistic_ms: 0.15,
            measured_over_predicted: measured_ms / 0.1,
          },
        ],
        kernels: [
          {
            mode: "graph",
            context: 32,
            family: "linear",
            calls: 4,
            measured_us: 50,
            predicted_us: 40,
            optimistic_us: 30,
            pessimistic_us: 60,
            measured_over_predicted: 1.25,
          },
        ],
      },
    });
    const c = compareRuns([run("inside", predicted(0.12)), run("outside", predicted(0.3))]);
    const row = tableOf(c, "predictions")!.rows[0]!;
    expect(row.cells[0]!.value).toEqual({ median: 0.12 / 0.1, p10: 0.12 / 0.15, p90: 0.12 / 0.08 });
    expect(row.cells[1]!.change).toBe("higher");
    expect(c.verdicts).toContain(
      "Measured ÷ PREDICTED step (tiny (110,656 parameters) · unfused): inside 1.20×, 1 of 1 inside the model's range; outside 3.00×, 0 of 1 inside the model's range.",
    );
    const v6 = structuredClone(predicted(0.12)) as ReadSummary;
    v6.schema_version = 6;
    delete v6.predictions!.kernels;
    const older = compareRuns([run("v6", v6), run("v7", predicted(0.12))]);
    expect(older.not_compared).toContainEqual({
      what: "Traced kernels against the kernel model's PREDICTIONS: v6",
      why: "v6's summary is schema version 6, older than these fields (version 7)",
    });
  });

  test("fewer than two runs is refused", () => {
    expect(() => compareRuns([run("a", base)])).toThrow(/two or more/);
  });

  test("the tables, compare.md and the plot come out of one comparison", () => {
    const c = compareRuns([
      run("A40", base),
      run(
        "H200",
        timed(base, () => 0.25),
      ),
    ]);
    const data = compareTableData(tableOf(c, "step")!, c);
    expect(data.columns.map((col) => col.header)).toEqual([
      "mode",
      "context (tokens)",
      "A40 (ms)",
      "H200 (ms)",
      "vs first",
    ]);
    expect(renderCompareTerminal(c)).toMatch(/Verdicts\n• H200 vs A40/);
    const md = renderCompareReport(c);
    expect(md).toMatch(/^# Decode-floor comparison: A40, H200/);
    expect(md).toContain("![Median time per token against context, per run and mode](latency.svg)");
    const svg = compareChart([run("A40", base), run("H200", base)]);
    expect(svg).toContain("H200: KV cache graph");
  });
});

describe("committed profiles (summary version 5)", () => {
  const all = committed("2026-11-30-cpu-all");
  const interventions = committed("2026-11-30-cpu-interventions");
  const peers = committed("2026-11-30-cpu-all-peers");

  test("each validates against the version-5 schema derived from the current one", () => {
    for (const s of [all, interventions, peers]) {
      expect(s.schema_version).toBe(5);
      expect(validateSummaryVersion(s, 5)).toEqual([]);
    }
  });

  test("two real runs compare at all their shared points; the fields version 5 lacks are absent, not zero", () => {
    const c = compareRuns([run("all", all), run("interventions", interventions)]);
    expect(tableOf(c, "step")!.rows.length).toBe(21);
    expect(tableOf(c, "families")!.rows.length).toBeGreaterThan(21);
    expect(tableOf(c, "launch")!.rows.map((r) => r.key[0])).toEqual(["host per empty launch"]);
    expect(c.not_compared).toContainEqual({ what: "Interventions: bytes and batch: all", why: "its summary has none" });
  });

  test("beside a version-7 run, a field version 5 did not record is said to be newer", () => {
    const c = compareRuns([run("v5", all), run("v7", syntheticSummary())]);
    const why = c.not_compared.map((n) => `${n.what}: ${n.why}`);
    expect(why).toContain(
      "Launch floor: graph-pdl node, grid barrier at once: v5's summary is schema version 5, older than these fields (version 6)",
    );
    expect(why).toContain(
      "Launch floor: grid barrier skewed, SC grid barrier at once, SC grid barrier skewed: v5's summary is schema version 5, older than these fields (version 7)",
    );
    // a field version 5 has, null there (the CPU has no device-side launch), is simply not measured
    expect(why).toContain("Launch floor: device per empty kernel back to back, graph node: not measured in v5");
  });

  test("peers and interventions are compared where both runs have them", () => {
    const peersTimed = (factor: number) => {
      const s = structuredClone(peers);
      for (const r of s.peers!.results) for (const p of r.points) p.ms = statsAround(p.ms.median * factor, 0.1);
      return s;
    };
    const peerTable = tableOf(compareRuns([run("a", peersTimed(1)), run("b", peersTimed(2))]), "peers")!;
    expect(peerTable.rows.length).toBe(16);
    expect(peerTable.rows.every((r) => r.cells[1]!.change === "slower")).toBe(true);
    const c = compareRuns([run("a", interventions), run("b", structuredClone(interventions))]);
    expect(tableOf(c, "interventions")!.rows.every((r) => r.cells[1]!.change === "within noise")).toBe(true);
    expect(c.verdicts.join("\n")).toMatch(
      /b vs a, interventions at context 128: bf16 instead of f32 cut the step 1\.97× in a and 1\.97× in b/,
    );
  });
});

describe("older summary versions' schemas", () => {
  /** The synthetic (current) summary taken back to version 6: the fields later versions added removed. */
  function version6(): Record<string, any> {
    const s: Record<string, any> = structuredClone(syntheticSummary());
    s.schema_version = 6;
    delete s.settings.fill;
    delete s.settings.prefill_flops_per_s;
    for (const r of s.seed_table) {
      delete r.fill;
      delete r.uncached_model_ms;
      delete r.kv_byte_share;
      delete r.read_bytes_per_s;
      delete r.floor_ms;
      delete r.over_floor;
    }
    for (const p of s.points) {
      delete p.read_bytes_per_s;
      delete p.over_floor;
    }
    for (const p of s.predictions?.points ?? []) delete p.kv_heads;
    if (s.interventions) {
      delete s.interventions.kv_heads;
      for (const p of [...s.interventions.configs, ...s.interventions.points]) delete p.kv_heads;
      for (const p of s.interventions.points) {
        delete p.read_bytes_per_s;
        delete p.over_floor;
      }
    }
    delete s.device.peaks.read_probe?.tracker_bytes;
    for (const f of ["grid_barrier_skewed_us", "grid_barrier_sc_us", "grid_barrier_sc_skewed_us"])
      delete s.device.launch[f];
    for (const p of s.points) if (p.breakdown) delete p.breakdown.overlapping_ops;
    for (const e of s.end_to_end) {
      delete e.ttft_ms;
      delete e.tpot_ms;
    }
    for (const f of ["fit", "resident_source", "by_context"]) delete s.memory[f];
    return s;
  }

  test("a version-6 summary validates as 6, not as 7, and not with a version-7 field left in", () => {
    expect(validateSummaryVersion(version6(), 6)).toEqual([]);
    expect(validateSummaryVersion(version6(), 7)).not.toEqual([]);
    const mixed = version6();
    mixed.device.launch.grid_barrier_sc_us = 1;
    expect(validateSummaryVersion(mixed, 6)).toEqual([
      "/device/launch: must NOT have additional properties (grid_barrier_sc_us)",
    ]);
  });

  test("a version-5 summary missing what compare reads fails naming the field", () => {
    const broken: Record<string, any> = structuredClone(committed("2026-11-30-cpu-all"));
    delete broken.points[3].device_ms.p90;
    expect(validateSummaryVersion(broken, 5)).toEqual(["/points/3/device_ms: must have required property 'p90'"]);
  });
});
