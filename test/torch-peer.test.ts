// The PyTorch peer (src/peers/torch_peer.py) on gpt2-tiny: the fixture's tokens and logits from every CPU
// variant, the timing and trace structure, the serve protocol, and one clear line when python or torch is missing.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { findTorchPython, startTorchPeer, TORCH_PEER_SCRIPT } from "../src/peers/torch.ts";
import { PeerFailure, type PeerInfo, type PeerDispatchSplit } from "../src/peers/process.ts";
import { maxRelativeError } from "../src/verify/compare.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const expected = JSON.parse(readFileSync(join(FIXTURE, "expected.json"), "utf8")) as {
  prompt: number[];
  generated: number[];
};
const fixtureLogits = new Float32Array(readFileSync(join(FIXTURE, "expected_logits.f32")).buffer.slice(0));
const V = 1001;
const dir = mkdtempSync(join(tmpdir(), "torch-peer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const found = findTorchPython();
const python = "python" in found ? found.python : null;
if (!python) console.warn(`skipping the PyTorch peer tests: ${"missing" in found ? found.missing : ""}`);

function peer(py: string, args: string[], env: Record<string, string | undefined> = process.env) {
  const r = Bun.spawnSync([py, TORCH_PEER_SCRIPT, ...args], { env, stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

interface OneShot extends PeerInfo {
  blas: string;
  generated: Record<string, number[]>;
  points: { variant: string; context: number; samples_ms: number[]; ms: { median: number } }[];
  traces: PeerDispatchSplit[];
}

describe.skipIf(!python)("the PyTorch peer on gpt2-tiny (CPU)", () => {
  const logitsDir = join(dir, "logits");
  mkdirSync(logitsDir);
  const run = peer(python!, [
    "--model",
    FIXTURE,
    "--threads",
    "1",
    "--contexts",
    "8,32",
    "--repeats",
    "2",
    "--warmup",
    "1",
    "--prompt-ids",
    expected.prompt.join(","),
    "--new-tokens",
    "20",
    "--logits-dir",
    logitsDir,
  ]);
  const out = JSON.parse(run.stdout || "{}") as OneShot;

  test("one JSON object on stdout, nothing on stderr; the CUDA-only variants say why they did not run", () => {
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(out.peer).toBe("torch");
    expect(out.threads).toBe(1);
    expect(out.blas.length).toBeGreaterThan(0);
    const byName = new Map(out.variants.map((v) => [v.name, v]));
    expect(byName.get("seed")!.available && byName.get("static")!.available).toBe(true);
    for (const v of ["graph", "compile"]) expect(byName.get(v)!.reason).toMatch(/needs CUDA/);
    const hf = byName.get("hf")!;
    if (!hf.available) expect(hf.reason).toMatch(/transformers is not importable/);
  });

  test("every available variant's greedy tokens and logits match the fixture's float64 reference", () => {
    const available = out.variants.filter((v) => v.available).map((v) => v.name);
    expect(Object.keys(out.generated).sort()).toEqual([...available].sort());
    for (const name of available) {
      expect(out.generated[name]).toEqual(expected.generated.slice(0, 20));
      // generated token i comes from the logits at position len(prompt) - 1 + i
      const got = new Float32Array(readFileSync(join(logitsDir, `${name}.f32`)).buffer.slice(0));
      const first = expected.prompt.length - 1;
      expect(maxRelativeError(got, fixtureLogits.subarray(first * V, (first + 20) * V))).toBeLessThan(1e-4);
    }
  });

  test("each variant timed at each context; the traced seed-style step splits into busy + idle = step", () => {
    for (const name of Object.keys(out.generated)) {
      for (const context of [8, 32]) {
        const p = out.points.find((q) => q.variant === name && q.context === context)!;
        expect(p.samples_ms).toHaveLength(2);
        expect(p.samples_ms.every((ms) => ms > 0)).toBe(true);
      }
    }
    expect(out.traces.map((t) => t.context)).toEqual([8, 32]);
    for (const t of out.traces) {
      expect(t.unit).toBe("torch calls");
      expect(t.busy_ms + t.idle_ms).toBeCloseTo(t.step_ms, 9);
      expect(t.busy_ms).toBeGreaterThan(0);
    }
    // the seed-style step makes the same torch calls at every context (the cache only grows)
    expect(out.traces[0]!.ops_per_step).toBe(out.traces[1]!.ops_per_step);
    expect(out.traces[0]!.ops_per_step).toBeGreaterThan(2 * 20);
  });

  test("the fixed-shape step that CUDA graphs and torch.compile run (masked attention over every cache row) gives the fixture's tokens and logits", () => {
    // the GPU-only variants replay this module; its math runs the same on the CPU
    const code = `
import json, sys
sys.path.insert(0, ${JSON.stringify(join(TORCH_PEER_SCRIPT, ".."))})
import torch_peer as tp
from torch_gpt2 import gpt2_fixed_step_module
args = tp.parse_args(["--model", ${JSON.stringify(FIXTURE)}, "--threads", "1", "--variants", "static", "--cache-rows", "40"])
torch = tp.import_torch(1)
peer = tp.TorchPeer(torch, args)
with torch.inference_mode():
    fixed = gpt2_fixed_step_module(torch, peer.m, peer.kc, peer.vc)
    prompt = ${JSON.stringify(expected.prompt)}
    logits = peer.m.forward_static(torch.tensor(prompt), 0, peer.kc, peer.vc)
    tok, pos, rows = logits.argmax().view(1), torch.tensor([len(prompt)]), [logits]
    out = [int(tok)]
    for _ in range(19):
        tok = fixed(tok, pos).view(1)
        pos.add_(1)
        rows.append(fixed.logits.clone())
        out.append(int(tok))
open(${JSON.stringify(join(dir, "fixed.f32"))}, "wb").write(torch.stack(rows).numpy().astype("<f4").tobytes())
print(json.dumps(out))`;
    const r = Bun.spawnSync([python!, "-c", code], { stdout: "pipe", stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(JSON.parse(r.stdout.toString())).toEqual(expected.generated.slice(0, 20));
    const got = new Float32Array(readFileSync(join(dir, "fixed.f32")).buffer.slice(0));
    const first = expected.prompt.length - 1;
    expect(maxRelativeError(got, fixtureLogits.subarray(first * V, (first + 20) * V))).toBeLessThan(1e-4);
  });

  test("serve mode: fill, time, trace, generate as JSON lines; a bad command fails with one line", async () => {
    const { peer: p, info } = await startTorchPeer({
      python: python!,
      modelDir: FIXTURE,
      device: "cpu",
      threads: 1,
      variants: ["seed", "static"],
      cacheRows: 40,
      fillSeed: 0,
    });
    try {
      expect(info.variants.map((v) => v.name)).toEqual(["seed", "static"]);
      const filled = await p.request<{ next_tokens: Record<string, number> }>({ cmd: "fill", context: 16 });
      expect(filled.next_tokens.seed).toBe(filled.next_tokens.static!);
      const timed = await p.request<{ samples_ms: number[] }>({ cmd: "time", variant: "static", steps: 3, warmup: 1 });
      expect(timed.samples_ms).toHaveLength(3);
      const trace = await p.request<PeerDispatchSplit>({ cmd: "trace" });
      expect(trace.context).toBe(16);
      const gen = await p.request<{ tokens: number[] }>({
        cmd: "generate",
        variant: "seed",
        prompt: expected.prompt,
        n: 20,
      });
      expect(gen.tokens).toEqual(expected.generated.slice(0, 20));
      const bad = p.request({ cmd: "time", variant: "graph", steps: 1 });
      await expect(bad).rejects.toBeInstanceOf(PeerFailure);
      await expect(bad).rejects.toThrow(/^PyTorch peer: variant graph is not available[^\n]*$/);
    } finally {
      await p.close();
    }
  }, 60_000);
});

describe("a missing python or torch: one clear line", () => {
  test("DECODE_FLOOR_PYTHON naming no program: what was tried and how to install torch", () => {
    const r = findTorchPython({ ...process.env, DECODE_FLOOR_PYTHON: join(dir, "no-such-python") });
    expect("missing" in r).toBe(true);
    const line = (r as { missing: string }).missing;
    expect(line).toMatch(/no-such-python: not found/);
    expect(line).toMatch(/apt-get install python3-torch libopenblas0/);
    expect(line).not.toContain("\n");
  });

  const anyPython = python ?? Bun.which("python3");
  test.skipIf(!anyPython)("a python whose torch does not import: the peer prints one `error:` line and exits 1", () => {
    // a package named torch that fails to import, first on the path: a python without torch, deterministically
    const shadow = join(dir, "shadow");
    mkdirSync(join(shadow, "torch"), { recursive: true });
    writeFileSync(
      join(shadow, "torch/__init__.py"),
      "raise ImportError(\"No module named 'torch' (shadowed by the test)\")\n",
    );
    const env = { ...process.env, PYTHONPATH: shadow };
    const r = peer(anyPython!, ["--model", FIXTURE], env);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^error: .* cannot import torch .*apt-get install python3-torch libopenblas0/);
    const probe = findTorchPython({ ...env, DECODE_FLOOR_PYTHON: anyPython! });
    expect((probe as { missing: string }).missing).toMatch(/shadowed by the test/);
  });

  test.skipIf(!python)("bad flags and a bad model directory: one `error:` line each", () => {
    for (const args of [
      ["--model", FIXTURE, "--variants", "turbo"],
      ["--model", join(dir, "nowhere")],
      ["--model", FIXTURE, "--contexts", "8,x"],
    ]) {
      const r = peer(python!, args);
      expect(r.code).toBe(1);
      expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(/^error: /);
    }
  });
});

const python3 = Bun.which("python3");
if (!python3) console.warn("skipping the peer's architecture test: no python3 on PATH");
test.skipIf(!python3)(
  "the peer reads a config's architecture as the project does: architectures first, else model_type",
  () => {
    const configs = [
      { architectures: ["Qwen3ForCausalLM"], model_type: "qwen3" },
      { model_type: "llama" },
      { architectures: [], model_type: "mistral" },
      { model_type: "gpt2" },
      { architectures: ["GPT2LMHeadModel"] },
    ];
    const code = `
import json, sys
sys.path.insert(0, ${JSON.stringify(join(TORCH_PEER_SCRIPT, ".."))})
from torch_llama import arch_of
print(json.dumps([arch_of(c) for c in json.loads(sys.argv[1])]))`;
    const r = Bun.spawnSync([python3!, "-c", code, JSON.stringify(configs)], { stdout: "pipe", stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(JSON.parse(r.stdout.toString())).toEqual(["qwen3", "llama", "mistral", null, null]);
  },
);

describe.skipIf(!python)("the PyTorch peer on the Llama family (CPU)", () => {
  const fixtures = [
    join(import.meta.dir, "fixtures/llama-tiny"),
    join(import.meta.dir, "fixtures/qwen3-tiny"),
    join(import.meta.dir, "../../shared/fixtures/llama-mini"),
    join(import.meta.dir, "../../shared/fixtures/qwen2-tiny"),
  ].filter((d) => existsSync(d));

  test.each(fixtures.map((d) => [d.split("/").pop()!, d] as const))(
    "%s: seed-style, static and the fixed-shape step give the float64 reference's tokens and logits",
    (name, fixture) => {
      const ref = JSON.parse(readFileSync(join(fixture, "expected.json"), "utf8"));
      const vocab = JSON.parse(readFileSync(join(fixture, "config.json"), "utf8")).vocab_size as number;
      const logits = new Float32Array(readFileSync(join(fixture, "expected_logits.f32")).buffer.slice(0));
      const logitsDir = join(dir, `logits-${name}`);
      mkdirSync(logitsDir);
      const args = ["--model", fixture, "--threads", "1", "--contexts", "8", "--repeats", "1", "--warmup", "0"];
      const r = peer(python!, [
        ...args,
        ...["--prompt-ids", ref.prompt.join(","), "--new-tokens", "20", "--logits-dir", logitsDir, "--no-trace"],
      ]);
      expect(r.stderr).toBe("");
      const out = JSON.parse(r.stdout) as OneShot;
      const first = ref.prompt.length - 1;
      for (const variant of ["seed", "static"]) {
        expect(out.generated[variant]).toEqual(ref.generated.slice(0, 20));
        const got = new Float32Array(readFileSync(join(logitsDir, `${variant}.f32`)).buffer.slice(0));
        expect(maxRelativeError(got, logits.subarray(first * vocab, (first + 20) * vocab))).toBeLessThan(1e-4);
      }
      const code = `
import json, sys
sys.path.insert(0, ${JSON.stringify(join(TORCH_PEER_SCRIPT, ".."))})
import torch_peer as tp
from torch_llama import llama_fixed_step_module
args = tp.parse_args(["--model", ${JSON.stringify(fixture)}, "--threads", "1", "--variants", "static", "--cache-rows", "40"])
torch = tp.import_torch(1)
peer = tp.TorchPeer(torch, args)
with torch.inference_mode():
    fixed = llama_fixed_step_module(torch, peer.m, peer.kc, peer.vc)
    prompt = ${JSON.stringify(ref.prompt)}
    logits = peer.m.forward_static(torch.tensor(prompt), 0, peer.kc, peer.vc)
    tok, pos, out = logits.argmax().view(1), torch.tensor([len(prompt)]), []
    out.append(int(tok))
    for _ in range(19):
        tok = fixed(tok, pos).view(1)
        pos.add_(1)
        out.append(int(tok))
print(json.dumps(out))`;
      const fixed = Bun.spawnSync([python!, "-c", code], { stdout: "pipe", stderr: "pipe" });
      expect(fixed.stderr.toString()).toBe("");
      expect(JSON.parse(fixed.stdout.toString())).toEqual(ref.generated.slice(0, 20));
    },
    120_000,
  );
});
