// `bun run compare` as users type it: bad inputs are one `error:` line with nothing written; --json is the
// comparison alone; --out writes compare.md, the plot and compare.json whole, and replaces an earlier one only with --force.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { XMLValidator } from "fast-xml-parser";

import { type Comparison, OLDEST_READ_VERSION } from "../src/profile/compare.ts";
import { SCHEMA_VERSION } from "../src/profile/types.ts";
import { COMPARE_FILES } from "../src/report/compare-markdown.ts";
import { ROOT, runCli, type CliRun } from "./helpers/cli.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

// each test starts bun (up to three times): seconds apiece when both cores are busy
setDefaultTimeout(60_000);

const tmp = mkdtempSync(join(tmpdir(), "compare-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const compare = (...args: string[]) => runCli("compare", args);
const V5_ALL = join(ROOT, "profiles/2026-11-30-cpu-all");
const V5_INTERVENTIONS = join(ROOT, "profiles/2026-11-30-cpu-interventions");

/** A run folder holding `summary` (an object, or raw text) as its summary.json. */
function runDir(name: string, summary: unknown): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "summary.json"), typeof summary === "string" ? summary : JSON.stringify(summary));
  return dir;
}

/** Exit 1, one `error:` line on stderr matching `pattern`, nothing on stdout. */
function expectError(r: CliRun, pattern: RegExp): void {
  expect(r.stdout).toBe("");
  expect(r.code).toBe(1);
  expect(r.stderr.split("\n").filter(Boolean)).toHaveLength(1);
  expect(r.stderr).toMatch(/^error: /);
  expect(r.stderr).toMatch(pattern);
}

const synthetic = runDir("synthetic", syntheticSummary());
const faster = (() => {
  const s = syntheticSummary();
  for (const p of s.points)
    for (const k of ["median", "mean", "p10", "p90", "min", "max"] as const) p.device_ms[k] /= 4;
  return runDir("faster", s);
})();

const empty = join(tmp, "empty");
mkdirSync(empty);

describe("compare: bad inputs are one error line and nothing written", () => {
  const out = join(tmp, "never-written");
  const cases: [string, string[], RegExp][] = [
    ["a file, not a folder", [join(V5_ALL, "report.md"), V5_ALL], /report\.md is not a folder/],
    ["a folder that does not exist", [join(tmp, "nowhere"), V5_ALL], /nowhere: no such folder/],
    ["a folder without summary.json", [empty, V5_ALL], /empty holds no summary\.json: not a profile run/],
    ["malformed JSON", [runDir("malformed", '{"schema_version": 7,'), V5_ALL], /malformed\/summary\.json is not JSON/],
    [
      "a current-version summary that fails its schema",
      [runDir("bad-current", { ...syntheticSummary(), points: "none" }), V5_ALL],
      new RegExp(`breaks schema version ${SCHEMA_VERSION} .*first: /points: must be array`),
    ],
    [
      "a version-5 summary that fails its schema",
      [
        runDir("bad5", JSON.parse(readFileSync(join(V5_ALL, "summary.json"), "utf8").replace('"p90"', '"p91"'))),
        V5_ALL,
      ],
      /breaks schema version 5 .*'p90'/,
    ],
    [
      "an unread version",
      [runDir("v4", { ...syntheticSummary(), schema_version: 4 }), V5_ALL],
      new RegExp(`schema version 4; compare reads versions ${OLDEST_READ_VERSION} to ${SCHEMA_VERSION}`),
    ],
    ["not a summary", [runDir("other", { hello: "world" }), V5_ALL], /has no integer schema_version/],
    ["one folder only", [V5_ALL], /two or more run folders \(got 1: /],
    ["no folder", [], /two or more run folders \(got 0\)/],
    ["the same folder twice", [V5_ALL, `${V5_ALL}/`], /is given twice/],
    [
      "labels that do not match the folders",
      [V5_ALL, V5_INTERVENTIONS, "--labels", "a"],
      /--labels names 1 run, but 2/,
    ],
    ["an unknown flag", [V5_ALL, V5_INTERVENTIONS, "--colour"], /Unknown argument: colour/],
  ];
  for (const [what, args, pattern] of cases) {
    test(what, () => {
      expectError(compare(...args, "--out", out), pattern);
      expect(existsSync(out)).toBe(false);
    });
  }

  test("--force without --out", () => {
    expectError(compare(V5_ALL, V5_INTERVENTIONS, "--force"), /give --out too/);
  });

  test("--out into a folder holding other files is refused, even with --force, and left as it was", () => {
    const busy = join(tmp, "busy");
    mkdirSync(busy);
    writeFileSync(join(busy, "notes.txt"), "mine");
    for (const force of [[], ["--force"]])
      expectError(
        compare(V5_ALL, V5_INTERVENTIONS, "--out", busy, ...force),
        /busy is a directory holding other files \(1\), not a comparison/,
      );
    expect(readdirSync(busy)).toEqual(["notes.txt"]);
    expect(readdirSync(tmp).filter((n) => n.includes("partial"))).toEqual([]);
  });

  test("--out holding an earlier comparison and the user's notes is refused, even with --force, and left as it was", () => {
    const mixed = join(tmp, "mixed");
    mkdirSync(mixed);
    writeFileSync(join(mixed, COMPARE_FILES.report), "an earlier comparison");
    writeFileSync(join(mixed, "notes.txt"), "mine");
    for (const force of [[], ["--force"]])
      expectError(
        compare(V5_ALL, V5_INTERVENTIONS, "--out", mixed, ...force),
        /mixed holds a comparison and files it did not write \(1: notes\.txt\), which replacing it would remove/,
      );
    expect(readdirSync(mixed).toSorted()).toEqual([COMPARE_FILES.report, "notes.txt"]);
    expect(readFileSync(join(mixed, COMPARE_FILES.report), "utf8")).toBe("an earlier comparison");
  });
});

describe("compare: outputs", () => {
  test("--json prints the comparison alone, and it parses", () => {
    const r = compare(synthetic, faster, "--json");
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const c = JSON.parse(r.stdout) as Comparison;
    expect(c.runs.map((x) => x.label)).toEqual(["synthetic", "faster"]);
    const step = c.tables.find((t) => t.section === "step")!;
    expect(step.rows.every((row) => row.cells[1]!.change === "faster")).toBe(true);
    expect(c.verdicts.some((v) => /^faster vs synthetic: the graph step at context 32 is 4\.00× faster/.test(v))).toBe(
      true,
    );
  });

  test("the committed version-5 runs compare in plain tables (no colour without a TTY), changes within the noise", () => {
    const r = compare(V5_ALL, V5_INTERVENTIONS, "--labels", "all,interventions");
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain("\u001b[");
    expect(r.stdout).toMatch(/^Time per token · gpt2 \(124,439,808 parameters\) · fused · f32\/f32$/m);
    expect(r.stdout).toMatch(
      /^eager-native\s+128\s+24\.202 \(24\.055–25\.286\)\s+24\.632 \(24\.036–25\.190\)\s+1\.02× within noise$/m,
    );
    expect(r.stdout).toMatch(
      /^• interventions vs all: the eager step at context 128 takes the same time within the noise/m,
    );
  });

  test("--out writes compare.md, the plot and compare.json whole, and replaces them only with --force", () => {
    const out = join(tmp, "nested/comparison");
    const r = compare(synthetic, faster, "--out", out);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe(
      `wrote 3 files to ${out}: ${COMPARE_FILES.report}, ${COMPARE_FILES.chart}, ${COMPARE_FILES.data}\n`,
    );
    expect(readdirSync(out).sort()).toEqual(Object.values(COMPARE_FILES).sort());
    const md = readFileSync(join(out, COMPARE_FILES.report), "utf8");
    expect(md).toMatch(/^# Decode-floor comparison: synthetic, faster/);
    expect(md).toContain("| mode | context (tokens) | synthetic (ms) | faster (ms) | vs first |");
    const svg = readFileSync(join(out, COMPARE_FILES.chart), "utf8");
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg).toContain("faster: KV cache graph");
    expect(JSON.parse(readFileSync(join(out, COMPARE_FILES.data), "utf8")).runs).toHaveLength(2);
    expect(r.stdout).toMatch(/^Verdicts$/m);

    expectError(compare(synthetic, faster, "--out", out), /already holds a comparison: give --force/);
    const again = compare(V5_ALL, V5_INTERVENTIONS, "--out", out, "--force");
    expect(again.code).toBe(0);
    expect(readFileSync(join(out, COMPARE_FILES.report), "utf8")).toMatch(
      /^# Decode-floor comparison: 2026-11-30-cpu-all, 2026-11-30-cpu-interventions/,
    );
    expect(readdirSync(join(tmp, "nested")).filter((n) => n !== "comparison")).toEqual([]);
  });
});
