// `bun run bench cpu` as a user runs it: each section's output on GPT-2 small's shapes (structure and
// numbers, never timing bounds), the competing load gone afterwards, and one clear line for bad flags.
import { describe, expect, test } from "bun:test";
import { freemem } from "node:os";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { READ_PROBE_PASSES } from "../src/backends/read-probe.ts";
import { openOpenBlas } from "../src/native/openblas.ts";
import { PRESET_CHOICES } from "../src/cli/common.ts";
import { DTYPES } from "../src/ops.ts";
import { ROOT, runCli } from "./helpers/cli.ts";
import { DeviceArena } from "./helpers/device.ts";
import { maxRelativeError, randomFloats } from "./helpers/reference.ts";

const LOAD_SCRIPT = join(ROOT, "src/cli/bench-load.ts");

const bench = (...args: string[]) => runCli("bench", args);

/** Processes running this checkout's competing-load program. */
function loadProcesses(): string[] {
  const ps = Bun.spawnSync(["ps", "-eo", "pid=,args="]).stdout.toString();
  return ps.split("\n").filter((line) => line.includes(LOAD_SCRIPT));
}

const number = String.raw`(\d+\.\d+)`;

describe("bench cpu sections", () => {
  test("--decode: the probe's size, passes and sweep, the floor's kind, a row per context with its read rate, floor and step ÷ floor", () => {
    const r = bench("cpu", "--decode", "--contexts", "40,8,40", "--steps", "2"); // each context once, ascending
    expect(r.code).toBe(0);
    const probe = new RegExp(
      `read bandwidth: best of (\\d+) passes summing ([\\d.]+ [MG]iB) on \\d+ threads? \\(median ${number}, ${number}–${number} GB/s\\)`,
    ).exec(r.stdout);
    expect(probe).not.toBeNull();
    expect(Number(probe![1])).toBe(READ_PROBE_PASSES);
    // the passes beside the steps, or why none are taken, follow the probe's figure on the same line; with a tracker
    // every replayed step (5 rounds × 1 step × 2 contexts) follows a pass of its own, without one none does
    const beside =
      /GB\/s\).*; (right before each timed step past the knee, a pass over \d+ MiB|no read passes beside the timed steps \()/.exec(
        r.stdout,
      );
    expect(beside).not.toBeNull();
    const tracked = beside![1]!.startsWith("right before");
    expect(r.stdout).toContain(`; ${tracked ? 10 : 0} of 10 eager-native steps after a read pass`);
    // how the weights (and the passes' buffer, where passes are taken) are paged, each a share of its resident bytes
    const pages =
      /^pages: the weights' mappings (\d+)% in 2 MiB pages(, the read passes' (\d+)%)? \(AnonHugePages ÷ Rss, \/proc\/self\/smaps\)(; paged unlike each other.*)?$/m.exec(
        r.stdout,
      );
    expect(pages).not.toBeNull();
    expect(pages![2] !== undefined).toBe(tracked);
    const shares = [pages![1], pages![3]].filter((x) => x !== undefined).map(Number);
    for (const share of shares) expect(share).toBeLessThanOrEqual(100);
    // unlike past 10 points apart (the shares printed are rounded: within a point of 10 either may be said)
    const apart = shares.length === 2 ? Math.abs(shares[0]! - shares[1]!) : 0;
    if (Math.abs(apart - 10) > 1) expect(pages![4] !== undefined).toBe(apart > 10);
    expect(r.stdout).toMatch(/sweep \(best pass per size\): 33\.6 MB [\d.]+, 67\.1 MB [\d.]+, .*4\.3 GB [\d.]+ GB\/s/);
    // the floor's kind follows from the weights against the sweep's knee, both printed
    const kind =
      /^(DRAM floor|cache floor, not a DRAM floor): the weights \(494\.6 MB\) are (past|below) the sweep's knee/m.exec(
        r.stdout,
      );
    expect(kind).not.toBeNull();
    expect(kind![2]).toBe(kind![1] === "DRAM floor" ? "past" : "below");
    const rowContexts = r.stdout.split("\n").flatMap((line) => /^\s+(\d+)\s+\d+\.\d/.exec(line)?.[1] ?? []);
    expect(rowContexts).toEqual(["8", "40"]);
    for (const context of [8, 40]) {
      const row = r.stdout.split("\n").find((line) => line.trimStart().startsWith(`${context} `));
      expect(row).toBeDefined();
      // weights MB, KV MB, read GB/s, floor ms, eager ms (p10–p90), eager-native ms (p10–p90), ratio (rounds' min–max)
      const cells = row!.trim().split(/\s+/);
      const weightsMb = Number(cells[1]),
        kvMb = Number(cells[2]),
        readGbs = Number(cells[3]);
      expect(weightsMb).toBeCloseTo(494.6, 0); // GPT-2 small's weights read per step
      expect(kvMb).toBeCloseTo((2 * 12 * (context + 1) * 768 * 4) / 1e6, 1); // K and V rows read
      expect(readGbs).toBeGreaterThan(0);
      // the floor: the bytes at that rate, the rate as printed (one decimal, ±0.05 GB/s: 0.6% at a loaded 9 GB/s)
      const floorMs = Number(cells[4]);
      expect(floorMs).toBeGreaterThanOrEqual((weightsMb + kvMb) / (readGbs + 0.05) - 0.005);
      expect(floorMs).toBeLessThanOrEqual((weightsMb + kvMb) / (readGbs - 0.05) + 0.005);
      // one step a round: the median over the steps lies within the rounds' min–max
      const median = Number(cells.at(-2));
      const [min, max] = cells.at(-1)!.replace(/[()]/g, "").split("–").map(Number);
      expect(min).toBeGreaterThan(0);
      expect(min).toBeLessThanOrEqual(median);
      expect(median).toBeLessThanOrEqual(max!);
    }
  });

  test("--decode --model DIR: the checkpoint's step, its weights far below any knee: a cache floor, said so", () => {
    const r = bench(
      "cpu",
      "--decode",
      "--model",
      join(ROOT, "test/fixtures/gpt2-tiny"),
      "--contexts",
      "4",
      "--steps",
      "2",
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("decode — the cached step ÷ its memory floor (goal ≤ 1.3), gpt2-tiny");
    // the weights as the table's MB column gives them, one decimal (it read "2 MB" over a table of 2.2)
    const weightsMb = /gpt2-tiny: (\d+\.\d) MB of weights$/m.exec(r.stdout)?.[1];
    expect(r.stdout.split("\n").find((line) => line.trimStart().startsWith("4 "))).toContain(` ${weightsMb} `);
    expect(r.stdout).toMatch(
      /^cache floor, not a DRAM floor: the weights \([\d.]+ [kM]B\) are below the sweep's knee/m,
    );
    expect(r.stdout.split("\n").some((line) => line.trimStart().startsWith("4 "))).toBe(true);
  });

  test("--decode --model DIR of the Llama family: its unfused step against the same floor", () => {
    const r = bench(
      "cpu",
      "--decode",
      "--model",
      join(ROOT, "test/fixtures/qwen3-tiny"),
      "--contexts",
      "4,100",
      "--steps",
      "2",
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("decode — the cached step ÷ its memory floor (goal ≤ 1.3), qwen3-tiny");
    expect(r.stdout.split("\n").some((line) => line.trimStart().startsWith("100 "))).toBe(true);
  });

  test("--contend 1: quiet and loaded steps, a slowdown, and the competing program gone afterwards", () => {
    const r = bench("cpu", "--contend", "1", "--steps", "4");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("while another program runs 1 busy thread (goal");
    expect(r.stdout).toMatch(new RegExp(`quiet +${number} ms`));
    expect(r.stdout).toMatch(new RegExp(`loaded ${number} ms`));
    expect(r.stdout).toMatch(new RegExp(`slowdown ${number}× \\(median\\)`));
    expect(r.stdout).not.toContain("decode —");
    expect(loadProcesses()).toEqual([]);
  });

  test("--prefill: GFLOP/s for the four linear shapes at T = 128 and 1000, OpenBLAS compared or said to be absent", () => {
    const r = bench("cpu", "--prefill");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`FMA peak: ${number} GFLOP/s`));
    expect(r.stdout).toMatch(/OpenBLAS: (OpenBLAS \d|absent — OpenBLAS not found)/);
    const blas = !r.stdout.includes("OpenBLAS: absent");
    for (const T of [128, 1000]) {
      for (const shape of ["768→2304", "768→768", "768→3072", "3072→768"]) {
        const row = r.stdout.split("\n").find((line) => line.startsWith(`${T}×${shape} `));
        expect(row).toBeDefined();
        const rest = row!
          .slice(row!.indexOf(")") + 1)
          .trim()
          .split(/\s+/);
        expect(Number(rest[0])).toBeGreaterThan(0); // ours, GFLOP/s
        if (blas)
          expect(Number(rest[3])).toBeGreaterThan(0); // ours ÷ OpenBLAS time
        else expect(rest.slice(2)).toEqual(["—", "—"]);
      }
      expect(r.stdout).toMatch(new RegExp(`T = ${T} +${number} GFLOP/s`));
    }
  });

  test("--prefill on a model of fewer positions: its linears at every T, its attention only where a sequence fits", () => {
    const r = bench("cpu", "--prefill", "--model", "test/fixtures/gpt2-tiny");
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/^1000×128→384 \(c_attn\) /m);
    expect(r.stdout).toContain("; T = 128, 1000 not run: past gpt2-tiny's 64 positions.");
  });
});

describe("bench: bad flags, one line, exit ≠ 0", () => {
  test.each([
    [["cpu", "--contend", "0"], "--contend must be an integer in 1..64 (got 0)"],
    [
      ["cpu", "--contexts", "8,1024"],
      "--contexts: 1024 is impossible for this model: a cached step at context c writes position c, and the model has n_positions 1024: its largest context is 1023",
    ],
    [["cpu", "--contexts", "eight"], '--contexts: "eight" is not a positive integer (e.g. --contexts 8,64,512)'],
    [["cpu", "--steps", "0"], "--steps must be an integer in 1..∞ (got 0)"],
    [["cpu", "--fast"], "Unknown argument: fast"],
    [["cpu", "--contend", "1", "--contend", "2"], "--contend is given 2 times; give it once"],
    [["cpu", "--preset", "gpt2-huge"], `--preset "gpt2-huge" is not one of: ${PRESET_CHOICES.join(", ")}`],
    [
      ["cpu", "--model", "test/fixtures/gpt2-tiny", "--preset", "gpt2"],
      "Arguments model and preset are mutually exclusive",
    ],
    [["cpu", "--model", "/nonexistent-model-dir"], "model directory not found: /nonexistent-model-dir"],

    [[], "name a benchmark: cpu"],
  ])("bench %p", (args, message) => {
    const r = bench(...args);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toBe(`error: ${message}\n`);
    expect(r.stdout).toBe("");
  });

  // bench has no --dtype: the refusal names what it can take instead (a machine with the memory runs it)
  const roomFor8b = freemem() > 30e9;
  if (roomFor8b) console.log("cli-bench: over 30 GB free, llama-3.1-8b's f32 weights may fit: its refusal not run");
  test.skipIf(roomFor8b)("weights past free memory: a smaller model, nothing printed before", () => {
    const r = bench("cpu", "--preset", "llama-3.1-8b", "--decode");
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(
      /^error: llama-3\.1-8b in f32 is 32\.1 GB of weights, more than this machine's [\d.]+ GB of free memory: it times f32 weights only; give a smaller --preset or --model\n$/,
    );
    expect(r.stdout).toBe("");
  });
});

describe("OpenBLAS through bun:ffi (the prefill yardstick)", () => {
  const blas = openOpenBlas(1);
  test("a library that cannot be loaded is reported, not thrown", () => {
    const missing = openOpenBlas(1, ["/nonexistent/libopenblas.so.0"]);
    expect("missing" in missing && missing.missing).toMatch(
      /^OpenBLAS not found \(\/nonexistent\/libopenblas\.so\.0: .+\); apt-get install libopenblas0/,
    );
  });

  test.skipIf("missing" in blas)(
    "it says how its threads wait after a call: told to sleep at once unless the user set OPENBLAS_THREAD_TIMEOUT or it is an OpenMP build (skipped where OpenBLAS is not installed)",
    () => {
      if ("missing" in blas) return; // skipped above: OpenBLAS is not installed here
      const expected = /USE_OPENMP/.test(blas.config)
        ? "an OpenMP build"
        : (process.env.OPENBLAS_THREAD_TIMEOUT ?? "4") !== "4"
          ? `OPENBLAS_THREAD_TIMEOUT=${process.env.OPENBLAS_THREAD_TIMEOUT}, as set by the user`
          : "OPENBLAS_THREAD_TIMEOUT=4: its threads sleep right after a call";
      expect(blas.config).toContain(expected);
    },
  );

  test.skipIf("missing" in blas)(
    "its sgemm computes the product op_linear computes (bias 0), so the two are timed on the same work (skipped where OpenBLAS is not installed)",
    () => {
      if ("missing" in blas) return; // skipped above: OpenBLAS is not installed here
      const backend = CpuBackend.open();
      const arena = new DeviceArena(backend);
      const [T, C, OC] = [37, 100, 70];
      const inp = randomFloats(T * C, 1),
        w = randomFloats(C * OC, 2),
        zero = new Float32Array(OC);
      const ours = arena.poisoned(T * OC),
        theirs = arena.poisoned(T * OC);
      const a = arena.put(inp),
        b = arena.put(w);
      backend.ops.op_linear(ours.ptr, 0, a.ptr, b.ptr, arena.put(zero).ptr, T, C, OC, DTYPES.f32);
      blas.sgemm(theirs.ptr, a.ptr, b.ptr, T, OC, C);
      expect(maxRelativeError(arena.floats(theirs), arena.floats(ours))).toBeLessThan(1e-5);
      arena.release();
      backend.close();
      blas.close();
    },
  );
});
