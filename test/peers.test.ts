// The peers of a study on gpt2-tiny: started on the project's weights, filled, timed step by step, traced,
// and checked token for token; a peer that is missing or dies is one line and the rest goes on.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { loadModel } from "../src/model/gpt2.ts";
import { llamaPeerUnavailable } from "../src/peers/llama.ts";
import { parsePeers, parseTorchVariants, peersHoldingWeights, PeerSet } from "../src/peers/peer-set.ts";
import { PeerFailure, PeerProcess } from "../src/peers/process.ts";
import { findTorchPython } from "../src/peers/torch.ts";
import { expectUserError } from "./helpers/expect.ts";

const ROOT = join(import.meta.dir, "..");
const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const expected = JSON.parse(readFileSync(join(FIXTURE, "expected.json"), "utf8")) as {
  prompt: number[];
  generated: number[];
};
const torchMissing = "missing" in findTorchPython();
const llamaMissing = llamaPeerUnavailable() !== null;

test("--peers: names, all, and one line for an unknown peer", () => {
  expect(parsePeers(undefined)).toEqual([]);
  expect(parsePeers("all")).toEqual(["torch", "llama.cpp"]);
  expect(parsePeers("llama.cpp,torch,torch")).toEqual(["llama.cpp", "torch"]);
  expectUserError(() => parsePeers("torch,vllm"), /--peers: "vllm" is not a peer \(peers: torch, llama\.cpp, all\)/);
});

test("the peers holding a copy of the weights in the backend's memory: both beside the CPU, PyTorch on a GPU", () => {
  expect(peersHoldingWeights(["torch", "llama.cpp"], "cpu")).toEqual(["torch", "llama.cpp"]);
  expect(peersHoldingWeights(["torch", "llama.cpp"], "cuda")).toEqual(["torch"]); // llama.cpp runs on the CPU only
  expect(peersHoldingWeights(["llama.cpp"], "cuda")).toEqual([]);
  expect(peersHoldingWeights([], "cpu")).toEqual([]);
});

test("--torch-variants: all five by default, a comma list, and one line naming the valid ones for a bad name", () => {
  expect(parseTorchVariants(undefined)).toEqual(["seed", "static", "graph", "compile", "hf"]);
  expect(parseTorchVariants("static, seed,seed")).toEqual(["static", "seed"]);
  expectUserError(
    () => parseTorchVariants("seed,eager"),
    /--torch-variants: "eager" is not a PyTorch variant \(variants: seed, static, graph, compile, hf\)/,
  );
  expectUserError(() => parseTorchVariants(","), /--torch-variants: "," is not a PyTorch variant/);
});

test("--torch-variants through bun src/cli/profile.ts: a bad name, or no PyTorch peer to choose for, is one error line", () => {
  for (const [args, message] of [
    [
      ["--peers", "torch", "--torch-variants", "seed,eager"],
      /^error: --torch-variants: "eager" is not a PyTorch variant \(variants: seed, static, graph, compile, hf\)$/,
    ],
    [
      ["--torch-variants", "seed"],
      /^error: --torch-variants chooses the PyTorch peer's variants: give --peers torch \(or all\) too$/,
    ],
  ] as const) {
    const p = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/profile.ts"), "--backend", "cpu", ...args], {
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(p.exitCode).not.toBe(0);
    expect(p.stdout.toString()).toBe("");
    expect(p.stderr.toString().trimEnd()).toMatch(message);
  }
});

describe.skipIf(torchMissing && llamaMissing)(
  "both peers on gpt2-tiny's weights (seeded weights written out as the study does)",
  () => {
    test("subjects, fill, one step at a time, the torch trace, and the fixture's greedy tokens from every subject", async () => {
      const weights = loadModel(FIXTURE);
      const lines: string[] = [];
      // no modelDir: the weights are written to a temporary checkpoint and GGUF file, as for seeded weights
      const set = await PeerSet.open({
        peers: ["torch", "llama.cpp"],
        weights,
        device: "cpu",
        threads: 1,
        maxContext: 40,
        fillSeed: 0,
        say: (l) => lines.push(l),
      });
      try {
        const ids = set.subjects.map((s) => s.id);
        if (!torchMissing) {
          expect(ids).toEqual(expect.arrayContaining(["torch:seed", "torch:static"]));
          expect(set.skipped.find((s) => s.name.startsWith("torch:graph"))!.reason).toMatch(/needs CUDA/);
          expect(set.subjects.find((s) => s.id === "torch:seed")!.settings.blas).toBeDefined();
        }
        if (!llamaMissing) expect(ids).toEqual(expect.arrayContaining(["llama.cpp:fa-off", "llama.cpp:fa-on"]));
        expect(lines.every((l) => !l.includes("\n"))).toBe(true);

        await set.fill(16);
        for (const s of set.subjects) {
          const samples = await set.time(s, 2, 1);
          expect(samples).toHaveLength(2);
          expect(samples!.every((ms) => ms > 0)).toBe(true);
        }
        const trace = await set.traceTorch();
        if (!torchMissing) expect(trace!.context).toBe(16);

        const tokens = await set.generate(expected.prompt, 20);
        expect([...tokens.keys()].sort()).toEqual([...ids].sort());
        for (const t of tokens.values()) expect(t).toEqual(expected.generated.slice(0, 20));
      } finally {
        await set.close();
      }
    }, 120_000);
  },
);

test("a peer that cannot start is skipped with one line (no node on PATH for llama.cpp)", async () => {
  const saved = process.env.PATH;
  process.env.PATH = "/nonexistent";
  const lines: string[] = [];
  try {
    const set = await PeerSet.open({
      peers: ["llama.cpp"],
      weights: loadModel(FIXTURE),
      device: "cpu",
      threads: 1,
      maxContext: 40,
      fillSeed: 0,
      say: (l) => lines.push(l),
    });
    expect(set.subjects).toEqual([]);
    expect(set.skipped).toEqual([
      { name: "llama.cpp", reason: "node is not on PATH (the llama.cpp peer runs under Node)" },
    ]);
    expect(lines).toEqual(["note: peer llama.cpp skipped: node is not on PATH (the llama.cpp peer runs under Node)"]);
    await set.close();
  } finally {
    process.env.PATH = saved;
  }
});

test("a peer process that dies mid-run fails with its own error line and exit code", async () => {
  const greeting = JSON.stringify({
    ok: true,
    peer: "fake",
    device: "cpu",
    device_name: "x",
    threads: 1,
    timing: "t",
    variants: [],
  });
  const script = `console.log(${JSON.stringify(greeting)}); for await (const _ of console) { console.error("error: the fake peer gave up"); process.exit(3); }`;
  const { peer, info } = await PeerProcess.start("fake peer", [process.execPath, "-e", script]);
  expect(info.peer).toBe("fake");
  const failed = peer.request({ cmd: "fill", context: 8 });
  await expect(failed).rejects.toBeInstanceOf(PeerFailure);
  await expect(failed).rejects.toThrow("fake peer: the fake peer gave up (exit 3)");
  await peer.close();
});
