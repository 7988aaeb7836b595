import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { XMLValidator } from "fast-xml-parser";
import { validateSummary } from "../src/report/schema.ts";
import { validateTrace } from "../src/report/trace.ts";
import { breakdownChart, latencyChart, writeProfileOutputs } from "../src/report/write.ts";
import { syntheticSteps, syntheticSummary } from "./helpers/synthetic-profile.ts";

const dir = mkdtempSync(join(tmpdir(), "decode-floor-write-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("writeProfileOutputs", () => {
  const steps = syntheticSteps();
  const summary = syntheticSummary(steps);
  const written = writeProfileOutputs(join(dir, "run"), summary, steps);
  const paths = written.paths;
  const read = (name: string) => readFileSync(join(dir, "run", name), "utf8");

  test("writes the six files and returns their paths", () => {
    expect(paths.map((p) => basename(p))).toEqual([
      "summary.json",
      "kernels.csv",
      "trace.json",
      "latency.svg",
      "breakdown.svg",
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
    for (const name of ["latency.svg", "breakdown.svg"]) expect(XMLValidator.validate(read(name))).toBe(true);
    for (const label of ["no cache", "KV cache eager", "KV cache graph"])
      expect(read("latency.svg")).toContain(`>${label}</text>`);
    expect(read("breakdown.svg")).toContain(">device idle</text>");
  });

  test("kernels.csv and report.md are there, linking the rest", () => {
    expect(read("kernels.csv")).toStartWith("Time (%),Total Time (ns)");
    const report = read("report.md");
    for (const name of ["summary.json", "trace.json", "kernels.csv", "latency.svg", "breakdown.svg"])
      expect(report).toContain(`(${name})`);
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
  });
});
