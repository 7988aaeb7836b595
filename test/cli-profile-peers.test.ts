// `bun run profile --peers …` on gpt2-tiny: the peers timed beside the modes at every context, checked token
// for token, in summary.json (schema-valid), report.md and the latency plot; missing peers are one line each.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { llamaPeerUnavailable } from "../src/peers/llama.ts";
import { findTorchPython } from "../src/peers/torch.ts";
import type { ProfileSummary } from "../src/profile/types.ts";
import { OUTPUT_FILES } from "../src/report/output-files.ts";
import { validateSummary } from "../src/report/schema.ts";
import { runCli } from "./helpers/cli.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const out = mkdtempSync(join(tmpdir(), "profile-peers-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const torch = !("missing" in findTorchPython());
const llama = llamaPeerUnavailable() === null;
const short = ["8,32", "--repeats", "2", "--warmup", "1", "--traced-steps", "1", "--e2e-tokens", "4"];

const profile = (args: string[], env: Record<string, string | undefined> = {}) => runCli("profile", args, env);

describe.skipIf(!torch && !llama)("profile --peers all on gpt2-tiny", () => {
  const dir = join(out, "all");
  let run: ReturnType<typeof profile>;
  let s: ProfileSummary;
  beforeAll(() => {
    run = profile([
      "--backend",
      "cpu",
      "--model",
      FIXTURE,
      "--contexts",
      ...short,
      "--peers",
      "all",
      "--out",
      dir,
      "--json",
    ]);
    s = JSON.parse(run.stdout) as ProfileSummary;
  }, 300_000);

  test("exits 0; summary.json has a schema-valid peers section", () => {
    expect(run.code).toBe(0);
    expect(validateSummary(s)).toEqual([]);
    expect(run.stderr).toMatch(/^peers: .*timed step by step beside the modes$/m);
  });

  test("every subject that runs here at every context, against the project's fastest mode, agreeing 20/20", () => {
    const ids = s.peers!.results.map((r) => r.id);
    if (torch) expect(ids).toEqual(expect.arrayContaining(["torch:seed", "torch:static"]));
    if (llama) expect(ids).toEqual(expect.arrayContaining(["llama.cpp:fa-off", "llama.cpp:fa-on"]));
    expect(s.peers!.reference_tokens).toHaveLength(20);
    for (const r of s.peers!.results) {
      expect(r.points.map((p) => p.context)).toEqual([8, 32]);
      for (const p of r.points) {
        expect(p.ms.n).toBe(2);
        const best = s.points
          .filter((q) => q.context === p.context && q.mode !== "uncached")
          .sort((a, b) => a.device_ms.median - b.device_ms.median)[0]!;
        expect(p.best_mode).toBe(best.mode);
        expect(p.ratio_to_best_mode).toBeCloseTo(p.ms.median / best.device_ms.median, 12);
        expect(p.ratio_to_floor).toBeGreaterThan(0);
      }
      expect(r.agreement).toMatchObject({ matched: 20, of: 20, agrees: true });
    }
    if (torch) expect(s.peers!.torch_dispatch.map((t) => t.context)).toEqual([8, 32]);
    expect(s.peers!.skipped.every((k) => k.reason.length > 0)).toBe(true);
  });

  test("report.md has the peers table and sentences; the latency plot has a line per subject", () => {
    const md = readFileSync(join(dir, OUTPUT_FILES.report), "utf8");
    expect(md).toContain("## Peers: PyTorch and llama.cpp on the same weights");
    expect(md).toMatch(/- Peers at context 32, same weights, same run: the project's fastest mode/);
    expect(md).toContain(
      "Greedy tokens: every peer agrees with the project on all 20 tokens generated after the prompt.",
    );
    const svg = readFileSync(join(dir, OUTPUT_FILES.latency), "utf8");
    for (const r of s.peers!.results) expect(svg).toContain(`>${r.short}</text>`);
  });
});

describe.skipIf(!llama)("profile --peers llama.cpp --fill synthetic on llama-tiny", () => {
  test("the peer runs at the prefilled context only, and the method says why", () => {
    const r = profile([
      "--backend",
      "cpu",
      "--model",
      join(import.meta.dir, "fixtures/llama-tiny"),
      "--contexts",
      "8,100",
      "--fill",
      "synthetic",
      "--repeats",
      "2",
      "--warmup",
      "1",
      "--e2e-tokens",
      "4",
      "--no-kernels",
      "--peers",
      "llama.cpp",
      "--out",
      join(out, "synthetic"),
      "--json",
    ]);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout) as ProfileSummary;
    expect(validateSummary(s)).toEqual([]);
    expect(s.seed_table.map((row) => row.fill)).toEqual(["prefill", "synthetic"]);
    expect(s.peers!.results.length).toBeGreaterThan(0);
    for (const p of s.peers!.results) {
      expect(p.points.map((q) => q.context)).toEqual([8]);
      expect(p.agreement).toMatchObject({ agrees: true });
    }
    expect(s.peers!.method).toContain("not run at the synthetically filled contexts (100)");
  }, 300_000);
});

test("peers that cannot run are one note line each, and the study still runs", () => {
  // a PATH with the compiler (the build stamp asks it its version) but no node (llama.cpp), and a python that does not exist (PyTorch)
  const bin = join(out, "bin");
  mkdirSync(bin);
  symlinkSync(Bun.which("g++")!, join(bin, "g++"));
  const r = profile(
    [
      "--backend",
      "cpu",
      "--model",
      FIXTURE,
      "--contexts",
      ...short,
      "--peers",
      "torch,llama.cpp",
      "--out",
      join(out, "none"),
      "--json",
    ],
    { PATH: bin, DECODE_FLOOR_PYTHON: join(out, "no-python") },
  );
  expect(r.code).toBe(0);
  const notes = r.stderr.split("\n").filter((l) => l.startsWith("note: peer "));
  expect(notes).toHaveLength(2);
  expect(notes[0]).toMatch(
    /^note: peer PyTorch skipped: no python with torch \(DECODE_FLOOR_PYTHON=.*no-python: not found\); on Debian `apt-get install python3-torch libopenblas0`/,
  );
  expect(notes[1]).toBe("note: peer llama.cpp skipped: node is not on PATH (the llama.cpp peer runs under Node)");
  const s = JSON.parse(r.stdout) as ProfileSummary;
  expect(validateSummary(s)).toEqual([]);
  expect(s.peers!.results).toEqual([]);
  expect(s.peers!.skipped.map((k) => k.name)).toEqual(["PyTorch", "llama.cpp"]);
  expect(s.seed_table.map((row) => row.context)).toEqual([8, 32]);
}, 120_000);

test("--peers naming no peer: one error line", () => {
  const r = profile(["--backend", "cpu", "--model", FIXTURE, "--peers", "vllm"]);
  expect(r.code).toBe(1);
  expect(r.stderr.trim().split("\n")).toEqual(['error: --peers: "vllm" is not a peer (peers: torch, llama.cpp, all)']);
});
