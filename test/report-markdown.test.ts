import { describe, expect, test } from "bun:test";
import { renderReport } from "../src/report/markdown.ts";
import { flopReductionText } from "../src/profile/verdicts.ts";
import { questionSentence } from "../src/report/sections.ts";
import { renderTerminalSummary } from "../src/report/terminal.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";
import { withoutColour } from "./helpers/expect.ts";

withoutColour();

describe("renderReport", () => {
  const summary = syntheticSummary();
  test("states the launch floor measured with empty ops", () => {
    expect(renderReport(summary)).toContain(
      "Launch floor: an empty op costs 2.50 us on the host per call; back to back the device retires one every 1.20 us; a graph node costs 0.80 us, " +
        "a programmatic (graph-pdl) node 0.50 us, and a grid barrier of the persistent step 0.70 us with every block arriving at once, " +
        "0.90 us past the last of skewed arrivals (the sequentially consistent design: 1.60 and 2.10 us) (synthetic).",
    );
  });
  const report = renderReport(summary);

  test("asks the question with this run's numbers", () => {
    const row = summary.seed_table.find((r) => r.context === 32)!;
    expect(questionSentence(summary)).toContain(`${flopReductionText(row.flop_reduction)} fewer FLOPs`);
    expect(report).toContain(`**The question.** ${questionSentence(summary)}`);
  });

  test("has every section in order", () => {
    const headings = report.split("\n").filter((l) => l.startsWith("## "));
    expect(headings).toEqual([
      "## Verdicts",
      "## Time per token: no cache vs KV cache",
      "## End-to-end generation",
      "## Where a step's time goes",
      "## Top operations per mode",
      "## Work model vs measured peaks",
      "## Memory",
      "## Tracing",
      "## Files",
      "## Run",
    ]);
  });

  test("lists every verdict and the seed-style table", () => {
    for (const v of summary.verdicts) expect(report).toContain(`- ${v}`);
    expect(report).toContain(
      "| context (tokens) | cache filled by | no cache (ms) | KV cache eager (ms) | KV cache graph (ms) | speedup eager (×) | speedup graph (×) | FLOP reduction (×) |",
    );
    const r = summary.seed_table[1]!;
    const { eager, graph } = r.cached;
    expect(report).toContain(
      `| 32 | prefill | ${r.uncached_ms!.toFixed(3)} | ${eager!.ms.toFixed(3)} | ${graph!.ms.toFixed(3)} | ${eager!.speedup!.toFixed(1)}× | ${graph!.speedup!.toFixed(1)}× |`,
    );
  });

  test("shows the time split, top ops per mode, work, memory, and links the files", () => {
    expect(report).toContain("| KV cache eager | 32 | 0.132 | 0.052 | 0.080 | 60.6% |");
    expect(report).toContain("**KV cache graph** at context 32");
    expect(report).toContain("| linear | 16 |");
    expect(report).toContain("Peaks: 1.00 TFLOP/s and 100.00 GB/s (synthetic)");
    expect(report).toContain("| KV cache per token | 1.0 kB | 1.0 kB |");
    for (const f of ["latency.svg", "breakdown.svg", "traffic.svg", "trace.json", "kernels.csv", "summary.json"])
      expect(report).toContain(`](${f})`);
  });

  test("names machine, device, date and command; escapes HTML in names but not in the command", () => {
    expect(report).toContain("device: Synthetic GPU &lt;sm_90&gt; &amp; co (cuda); 2025-01-02T03:04:05.000Z");
    expect(report).toContain("```sh\nbun run profile --modes uncached,eager,graph --contexts 4,32\n```");
    expect(report).not.toContain("<sm_90>");
  });

  test("copes with missing measurements", () => {
    const s = syntheticSummary();
    s.seed_table = s.seed_table.map((r) => ({ ...r, uncached_ms: null, speedup_eager: null, speedup_graph: null }));
    s.regimes = [];
    for (const p of s.points) delete p.split;
    const text = renderReport(s);
    expect(text).toContain("is the per-token floor launch overhead?");
    expect(text).toContain("| 4 | prefill | – |");
    expect(text).toContain("_No step of this run was traced op by op: no per-kernel regimes._");
  });

  test("paired floors: says how they were taken, and where a context's steps ran at more than one memory speed", () => {
    const s = syntheticSummary();
    const row = s.seed_table.find((r) => r.context === 32)!;
    const fastest = Math.min(row.cached.eager!.ms, row.cached.graph!.ms);
    // the median step 0.84x the floor at the passes' median rate, each step 1.00x its own pass's floor
    Object.assign(row, { read_bytes_per_s: 47.6e9, floor_ms: fastest / 0.84, over_floor: 1.0 });
    const mixed = renderReport(s);
    expect(mixed).toContain("Memory floor = the cached step's bytes (work model) at the memory's read rate");
    expect(mixed).toContain(
      `At context 32 the fastest mode's median step (${fastest.toFixed(3)} ms) is 0.84× the floor at its passes' median rate, ` +
        "where each step against its own pass gives 1.00×: its steps and passes spanned more than one of the memory's speeds, " +
        "and the ratio, each step against the rate read right before it, is the one to read.",
    );
    row.over_floor = 0.86; // within 10% of 0.84: one speed, nothing to say
    expect(renderReport(s)).not.toContain("spanned more than one of the memory's speeds");
  });

  test("on the CPU the split says idle and host issue are one time, and an unpaired floor is not DRAM's", () => {
    expect(report).not.toContain("On the CPU the ops run on the thread that issues them");
    expect(report).not.toContain("not a DRAM floor");
    const s = syntheticSummary();
    s.device.backend = "cpu";
    const cpu = renderReport(s);
    expect(cpu).toContain("On the CPU the ops run on the thread that issues them, so idle and host issue are one time");
    expect(cpu).toContain(
      "so this is a cache floor's stand-in, not a DRAM floor: a step can beat it (÷ floor under 1).",
    );
  });

  test("bytes shares are of the peak, or of the read rate beside the steps where they were paired", () => {
    expect(report).toContain("| of peak B/s (%) |");
    const s = syntheticSummary();
    s.points[0]!.read_bytes_per_s = 40e9;
    const paired = renderReport(s);
    expect(paired).toContain("| of the read rate beside it (%) |");
    expect(paired).not.toContain("| of peak B/s (%) |");
    expect(paired).toContain("its bytes share is of the read rate beside them (their passes' median)");
  });

  test("says how each cache was filled, and labels the uncached step the work model's where it was not timed", () => {
    expect(report).toContain("Every cache was filled by a real prefill.");
    const s = syntheticSummary();
    const last = s.seed_table[s.seed_table.length - 1]!;
    Object.assign(last, { fill: "synthetic", uncached_ms: null, uncached_model_ms: 1234.5 });
    const text = renderReport(s);
    expect(text).toContain(`| ${last.context} | synthetic | ~1234.500 (work model) |`);
    expect(text).toContain(
      `At context ${last.context} the cache was filled synthetically (a short real prefill, the other rows drawn to its distribution; --fill auto); elsewhere by a real prefill. ` +
        `The no-cache step was not timed at context ${last.context} (it takes more than seconds): its time there is the work model's FLOPs at the prefill rate measured in this run, 2500.0 GFLOP/s.`,
    );
    expect(text).not.toContain("prefilled whole");
    s.settings.fill = "synthetic"; // asked of every point, the ones no longer than its real prefill were prefilled
    const [first] = s.seed_table;
    expect(first!.fill).toBe("prefill");
    expect(renderReport(s)).toContain(
      `Context ${first!.context} is no longer than the real prefill a synthetic fill starts with, so it was prefilled whole.`,
    );
  });
});

describe("renderTerminalSummary", () => {
  test("prints the question, the tables with units and the verdicts", () => {
    const s = syntheticSummary();
    const text = renderTerminalSummary(s);
    expect(text).toStartWith(questionSentence(s));
    expect(text).toContain("context (tokens)  cache filled by  no cache (ms)");
    expect(text).toContain("End-to-end generation");
    expect(text).toContain("single samples, not medians");
    expect(text).toMatch(/to first token \(ms\)\s+per token after it \(ms\)/);
    for (const e of s.end_to_end) expect(text).toContain(e.ttft_ms.toFixed(3));
    expect(text).toContain("Where a step's time goes");
    expect(text).toContain("Top operations: KV cache eager at context 32");
    expect(text).toContain("Op time total per step: 52.000 us");
    for (const v of s.verdicts) expect(text).toContain(`• ${v}`);
    expect(text).toContain("Synthetic GPU <sm_90> & co");
  });
});
