import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { GPT2Config } from "../src/model/gpt2.ts";
import {
  buildProfileTrace,
  TraceBuilder,
  validateTrace,
  type ChromeTrace,
  type CompleteEvent,
} from "../src/report/trace.ts";
import { syntheticStep, syntheticSteps } from "./helpers/synthetic-profile.ts";

const GOLDEN = join(import.meta.dir, "fixtures", "golden-trace.json");

const oneLayer: GPT2Config = {
  name: "one",
  n_layer: 1,
  n_head: 1,
  n_embd: 8,
  n_positions: 8,
  vocab_size: 11,
  layer_norm_epsilon: 1e-5,
};
const run = {
  tool: "decode-floor 0.1.0",
  command: "bun run profile",
  date: "2025-01-02T03:04:05.000Z",
  device: "Synthetic GPU",
};

function goldenTrace(): ChromeTrace {
  const steps = [
    syntheticStep(oneLayer, {
      mode: "eager",
      context: 2,
      start_us: 0,
      launch_us: 4,
      gap_us: 1,
      kernel_us: 2,
      correlation: 1,
    }),
    syntheticStep(oneLayer, {
      mode: "graph",
      context: 2,
      start_us: 200,
      launch_us: 6,
      gap_us: 3,
      kernel_us: 2,
      correlation: 100,
    }),
  ];
  return buildProfileTrace(steps, { backend: "cuda", run });
}

describe("buildProfileTrace", () => {
  test("matches the golden trace (UPDATE_GOLDEN=1 rewrites it)", () => {
    const trace = goldenTrace();
    if (process.env.UPDATE_GOLDEN) writeFileSync(GOLDEN, `${JSON.stringify(trace, null, 1)}\n`);
    expect(trace).toEqual(JSON.parse(readFileSync(GOLDEN, "utf8")));
  });

  test("the golden trace is sound", () => {
    expect(validateTrace(goldenTrace())).toEqual([]);
  });

  test("names a process per mode with a host and a device track, and links each launch to its kernel", () => {
    const trace = goldenTrace();
    const names = trace.traceEvents.flatMap((e) => (e.ph === "M" && "name" in e.args ? [e.args.name] : []));
    expect(names).toEqual([
      "eager (cuda)",
      "host: step issue + launches",
      "GPU stream",
      "graph (cuda)",
      "host: step issue + launches",
      "GPU stream",
    ]);
    const starts = trace.traceEvents.filter((e) => e.ph === "s");
    expect(starts).toHaveLength(15 + 1); // every eager launch, and the one graph launch
    const kernel = trace.traceEvents.find((e): e is CompleteEvent => e.ph === "X" && e.cat === "kernel")!;
    expect(kernel.args).toMatchObject({
      layer: null,
      op: "embed",
      label: "embed",
      grid: [1, 1, 1],
      block: [256, 1, 1],
      "registers per thread": 32,
      "shared memory": 1024,
      correlation: 1,
    });
    expect(trace.otherData).toEqual(run);
  });

  test("kernels that overlap the one before (graph-pdl) go on lanes of their own: the trace stays valid and every kernel is kept", () => {
    const step = syntheticStep(oneLayer, {
      mode: "graph-pdl",
      context: 2,
      start_us: 0,
      launch_us: 6,
      gap_us: 1,
      kernel_us: 4,
      correlation: 1,
    });
    // each kernel starts 2 µs before its predecessor ends, as under programmatic dependent launch
    const ops = step.ops.map((o, i) => ({ ...o, start_us: 200 + 3 * i, end_us: 205 + 3 * i }));
    const trace = buildProfileTrace([{ ...step, ops }], { backend: "cuda", run });
    expect(validateTrace(trace)).toEqual([]);
    const kernels = trace.traceEvents.filter((e): e is CompleteEvent => e.ph === "X" && e.cat === "kernel");
    expect(kernels).toHaveLength(ops.length);
    expect(kernels.map((k) => k.tid)).toEqual(ops.map((_, i) => 2 + (i % 2)));
    const lanes = trace.traceEvents.flatMap((e) =>
      e.ph === "M" && e.name === "thread_name" && e.tid >= 2 ? [e.args.name] : [],
    );
    expect(lanes).toEqual(["GPU stream", "GPU stream: overlapping the kernel before (2)"]);
    // the same kernels on one track would not be a valid trace
    const oneTrack = {
      ...trace,
      traceEvents: trace.traceEvents.map((e) => (e.ph === "X" && e.cat === "kernel" ? { ...e, tid: 2 } : e)),
    };
    expect(validateTrace(oneTrack).some((p) => p.includes("partly overlaps"))).toBe(true);
  });

  test("the full synthetic profile validates", () => {
    expect(validateTrace(buildProfileTrace(syntheticSteps(), { backend: "cuda", run }))).toEqual([]);
  });
});

describe("validateTrace", () => {
  const named = () => new TraceBuilder().process(1, "p", 0).thread(1, 1, "host", 0).thread(1, 2, "device", 1);

  test("catches a partial overlap on one track", () => {
    const trace = named()
      .slice({ pid: 1, tid: 1, name: "a", cat: "c", ts: 0, dur: 10 })
      .slice({ pid: 1, tid: 1, name: "b", cat: "c", ts: 5, dur: 10 })
      .build({});
    expect(validateTrace(trace)).toEqual(['track 1/1: "b" [5, 15] partly overlaps "a" [0, 10]']);
  });

  test("accepts nesting and overlaps on different tracks", () => {
    const trace = named()
      .slice({ pid: 1, tid: 1, name: "outer", cat: "c", ts: 0, dur: 10 })
      .slice({ pid: 1, tid: 1, name: "inner", cat: "c", ts: 2, dur: 8 })
      .slice({ pid: 1, tid: 1, name: "next", cat: "c", ts: 10, dur: 1 })
      .slice({ pid: 1, tid: 2, name: "other", cat: "c", ts: 5, dur: 10 })
      .build({});
    expect(validateTrace(trace)).toEqual([]);
  });

  test("catches an unpaired flow and a flow outside any slice", () => {
    const trace = named().slice({ pid: 1, tid: 1, name: "launch", cat: "c", ts: 0, dur: 2 }).build({});
    trace.traceEvents.push({ ph: "s", name: "ac2g", cat: "ac2g", id: 7, pid: 1, tid: 1, ts: 1 });
    trace.traceEvents.push({ ph: "s", name: "ac2g", cat: "ac2g", id: 8, pid: 1, tid: 1, ts: 1 });
    trace.traceEvents.push({ ph: "f", name: "ac2g", cat: "ac2g", id: 8, bp: "e", pid: 1, tid: 2, ts: 5 });
    expect(validateTrace(trace)).toEqual([
      "flow ac2g:7: 1 start(s) and 0 end(s); each id needs exactly one of each",
      "flow ac2g:8: end is inside no slice of its track",
    ]);
  });

  test("catches a negative dur, a bad ts, an absolute ts and a missing name", () => {
    const trace = named()
      .slice({ pid: 1, tid: 1, name: "neg", cat: "c", ts: 0, dur: -1 })
      .slice({ pid: 1, tid: 1, name: "abs", cat: "c", ts: 1.7e15, dur: 1 })
      .build({});
    trace.traceEvents.push({ ph: "X", name: "nan", cat: "c", pid: 1, tid: 1, ts: Number.NaN, dur: 1 });
    trace.traceEvents.push({ ph: "X", name: "", cat: "c", pid: 2, tid: 1, ts: 0, dur: 1 });
    const problems = validateTrace(JSON.parse(JSON.stringify(trace)));
    expect(problems).toContain('event 6 (X "neg"): dur must be a number ≥ 0, got -1');
    expect(problems).toContain(
      'event 7 (X "abs"): ts 1700000000000000 looks absolute; write it relative to the run\'s start',
    );
    expect(problems).toContain('event 8 (X "nan"): ts must be a number ≥ 0, got null');
    expect(problems).toContain('event 9 (X ""): missing name');
  });

  test("catches unnamed processes and tracks", () => {
    const trace = new TraceBuilder().slice({ pid: 3, tid: 4, name: "x", cat: "c", ts: 0, dur: 1 }).build({});
    expect(validateTrace(trace)).toEqual(["process 3 has no process_name", "track 3/4 has no thread_name"]);
  });

  test("rejects what is not a trace", () => {
    expect(validateTrace([])).toEqual(["not an object with a traceEvents array"]);
  });
});
