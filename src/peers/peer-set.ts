// The peers of a study run: PyTorch and llama.cpp on the project's own weights, each a process that fills
// its caches to a context and times one decode step at a time, so the study can interleave them with its
// own modes. A peer that cannot start, or fails later, is dropped with one line; the study goes on.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { BackendKind } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import {
  familyNameOf,
  saveAnyModel,
  type FamilyName,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import type { LlamaConfig, LlamaWeights } from "../model/llama.ts";
import type { GPT2Weights } from "../model/gpt2.ts";
import { writeGPT2GGUF } from "./gguf-gpt2.ts";
import { llamaCppRefuses, writeLlamaGGUF } from "./gguf-llama.ts";
import { llamaPeerUnavailable, startLlamaPeer } from "./llama.ts";
import { PeerFailure, type PeerInfo, type PeerProcess, type PeerDispatchSplit } from "./process.ts";
import { findTorchPython, startTorchPeer } from "./torch.ts";

/**
 * Each family's GGUF layout, as llama.cpp's converter writes it, and why llama.cpp would not load a config's file
 * (null: it would). The PyTorch peer picks its model from the checkpoint's config.json: torch_peer.py over
 * torch_gpt2.py and torch_llama.py.
 */
const GGUF_LAYOUTS: {
  [F in FamilyName]: { write: (w: ModelWeights, path: string) => void; refuses: (cfg: ModelConfig) => string | null };
} = {
  gpt2: { write: (w, path) => writeGPT2GGUF(w as GPT2Weights, path), refuses: () => null },
  llama: {
    write: (w, path) => writeLlamaGGUF(w as LlamaWeights, path),
    refuses: (cfg) => llamaCppRefuses(cfg as LlamaConfig),
  },
};

export const PEER_NAMES = ["torch", "llama.cpp"] as const;
export type PeerName = (typeof PEER_NAMES)[number];
/** The PyTorch variants the study can ask for (each that cannot run here says why) */
export const TORCH_VARIANTS = ["seed", "static", "graph", "compile", "hf"] as const;
export type TorchVariant = (typeof TORCH_VARIANTS)[number];

/**
 * The peers that hold a copy of the weights in the backend's memory beside the run's own, each in fp32 in its own
 * process: PyTorch on the backend's device, llama.cpp on the host (it runs only beside the CPU backend).
 */
export function peersHoldingWeights(names: readonly PeerName[], backend: BackendKind): PeerName[] {
  return names.filter((name) => name === "torch" || backend !== "cuda");
}

/** `--peers torch,llama.cpp` or `all` (undefined: none). */
export function parsePeers(flag: string | undefined): PeerName[] {
  if (flag === undefined) return [];
  const names =
    flag === "all"
      ? [...PEER_NAMES]
      : flag
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
  const bad = names.find((n) => !(PEER_NAMES as readonly string[]).includes(n));
  if (bad !== undefined || names.length === 0)
    throw new UserError(`--peers: ${JSON.stringify(bad ?? flag)} is not a peer (peers: ${PEER_NAMES.join(", ")}, all)`);
  return [...new Set(names)] as PeerName[];
}

/** `--torch-variants seed,static` (undefined: all of them): a cold torch.compile alone can take a minute. */
export function parseTorchVariants(flag: string | undefined): TorchVariant[] {
  if (flag === undefined) return [...TORCH_VARIANTS];
  const names = flag
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = names.find((n) => !(TORCH_VARIANTS as readonly string[]).includes(n));
  if (bad !== undefined || names.length === 0)
    throw new UserError(
      `--torch-variants: ${JSON.stringify(bad ?? flag)} is not a PyTorch variant (variants: ${TORCH_VARIANTS.join(", ")})`,
    );
  return [...new Set(names)] as TorchVariant[];
}

/** One way a peer runs the step: a subject of the study beside the project's own modes. */
export interface PeerSubject {
  /** "torch:seed", "llama.cpp:fa-off" */
  id: string;
  peer: PeerName;
  variant: string;
  /** for tables and plot legends: "PyTorch seed-style" */
  short: string;
  label: string;
  /** the peer's software, e.g. "torch 2.11.0 (python 3.12.3)" */
  version: string;
  device: string;
  settings: Record<string, string | number | boolean>;
}

export interface PeerSetOptions {
  peers: PeerName[];
  /** the PyTorch peer's variants (default: all) */
  torchVariants?: TorchVariant[];
  weights: ModelWeights;
  /** the checkpoint the project loaded, if any (else the seeded weights are written out) */
  modelDir?: string;
  device: "cpu" | "cuda";
  threads: number;
  /** the largest context any subject must hold: the sweep's, or the agreement check's prompt + tokens */
  maxContext: number;
  fillSeed: number;
  /** where "peer X skipped: …" lines go */
  say: (line: string) => void;
}

interface RunningPeer {
  name: PeerName;
  process: PeerProcess;
  info: PeerInfo;
}

const str = (v: unknown) => (typeof v === "string" ? v : String(v));

function versionOf(info: PeerInfo): string {
  if (info.peer === "torch") {
    const py = info.python as { version: string; executable: string };
    return `torch ${str(info.torch)}${info.transformers ? `, transformers ${str(info.transformers)}` : ""} (python ${py.version}, ${py.executable})`;
  }
  return `node-llama-cpp ${str(info.node_llama_cpp)}, llama.cpp ${str(info.llama_cpp)} (${str(info.build)} binaries, node ${str(info.node)})`;
}

/** The peer-wide facts every subject of a peer shares (BLAS, timing method), beside the variant's own. */
function settingsOf(
  info: PeerInfo,
  own: Record<string, string | number | boolean> | undefined,
): Record<string, string | number | boolean> {
  const shared: Record<string, string | number | boolean> = { timing: info.timing };
  if (typeof info.blas === "string") shared.blas = info.blas;
  return { ...own, ...shared };
}

export class PeerSet {
  readonly subjects: PeerSubject[] = [];
  /** peers and variants that did not run, each with its one-line reason */
  readonly skipped: { name: string; reason: string }[] = [];
  private readonly running = new Map<PeerName, RunningPeer>();

  private constructor(
    private readonly o: PeerSetOptions,
    private readonly scratch: string,
  ) {}

  /** Writes the weights where the peers need them (HF directory, GGUF), starts every peer that can run here. */
  static async open(o: PeerSetOptions): Promise<PeerSet> {
    const scratch = mkdtempSync(join(tmpdir(), "decode-floor-peers-"));
    const set = new PeerSet(o, scratch);
    try {
      for (const name of o.peers) await set.start(name);
    } catch (e) {
      await set.close();
      throw e;
    }
    return set;
  }

  private async start(name: PeerName): Promise<void> {
    const o = this.o;
    let started: { peer: PeerProcess; info: PeerInfo };
    try {
      if (name === "torch") {
        const found = findTorchPython();
        if ("missing" in found) return this.skip("PyTorch", found.missing);
        started = await startTorchPeer({
          python: found.python,
          modelDir: this.modelDir(),
          device: o.device,
          threads: o.threads,
          variants: o.torchVariants ?? [...TORCH_VARIANTS],
          cacheRows: o.maxContext + 1,
          fillSeed: o.fillSeed,
        });
      } else {
        if (o.device !== "cpu")
          return this.skip("llama.cpp", `runs on the CPU in this study, and this run's backend is ${o.device}`);
        const layout = GGUF_LAYOUTS[familyNameOf(o.weights.config)];
        const why = llamaPeerUnavailable() ?? layout.refuses(o.weights.config);
        if (why) return this.skip("llama.cpp", why);
        const gguf = join(this.scratch, "model.gguf");
        layout.write(o.weights, gguf);
        started = await startLlamaPeer({ gguf, threads: o.threads, maxContext: o.maxContext, fillSeed: o.fillSeed });
      }
    } catch (e) {
      if (e instanceof PeerFailure) return this.skip(name === "torch" ? "PyTorch" : "llama.cpp", e.message);
      throw e;
    }
    const { peer, info } = started;
    this.running.set(name, { name, process: peer, info });
    for (const v of info.variants) {
      if (!v.available) {
        this.skipped.push({ name: `${name}:${v.name} (${v.label})`, reason: v.reason ?? "not available" });
        continue;
      }
      this.subjects.push({
        id: `${name}:${v.name}`,
        peer: name,
        variant: v.name,
        short: v.short,
        label: v.label,
        version: versionOf(info),
        device: `${info.device_name} (${info.device})`,
        settings: settingsOf(info, v.settings),
      });
    }
  }

  /** The checkpoint directory the PyTorch peer loads: the user's, or the seeded weights written out once. */
  private modelDir(): string {
    if (this.o.modelDir) return this.o.modelDir;
    const dir = join(this.scratch, "hf");
    saveAnyModel(this.o.weights, dir);
    return dir;
  }

  private skip(name: string, reason: string): void {
    this.skipped.push({ name, reason });
    this.o.say(`note: peer ${name} skipped: ${reason}`);
  }

  /** A peer that failed mid-run: its subjects leave the study, with the reason. */
  private async drop(name: PeerName, e: unknown): Promise<void> {
    if (!(e instanceof PeerFailure)) throw e;
    const running = this.running.get(name);
    this.running.delete(name);
    const gone = this.subjects.filter((s) => s.peer === name);
    this.subjects.splice(0, this.subjects.length, ...this.subjects.filter((s) => s.peer !== name));
    this.skipped.push({ name: gone.map((s) => s.id).join(", ") || name, reason: `failed: ${e.message}` });
    this.o.say(`warning: ${e.message}; the study goes on without it`);
    await running?.process.close().catch(() => undefined);
  }

  private async ask<T>(name: PeerName, command: Record<string, unknown>): Promise<T | null> {
    const running = this.running.get(name);
    if (!running) return null;
    try {
      return await running.process.request<T>(command);
    } catch (e) {
      await this.drop(name, e);
      return null;
    }
  }

  /** Every running peer's caches hold `context` tokens of the fill prompt. */
  async fill(context: number): Promise<void> {
    for (const name of [...this.running.keys()]) await this.ask(name, { cmd: "fill", context });
  }

  /** Milliseconds of `steps` decode steps of one subject at the filled context (after `warmup`), or null if its peer failed. */
  async time(subject: PeerSubject, steps = 1, warmup = 0): Promise<number[] | null> {
    const r = await this.ask<{ samples_ms: number[] }>(subject.peer, {
      cmd: "time",
      variant: subject.variant,
      steps,
      warmup,
    });
    return r?.samples_ms ?? null;
  }

  /** PyTorch's seed-style step at the filled context under torch.profiler: where its time goes. */
  async traceTorch(): Promise<PeerDispatchSplit | null> {
    if (!this.subjects.some((s) => s.id === "torch:seed")) return null;
    return this.ask<PeerDispatchSplit>("torch", { cmd: "trace" });
  }

  /** Each subject's greedy tokens for `prompt` (n of them), by subject id. */
  async generate(prompt: number[], n: number): Promise<Map<string, number[]>> {
    const out = new Map<string, number[]>();
    for (const s of [...this.subjects]) {
      const r = await this.ask<{ tokens: number[] }>(s.peer, { cmd: "generate", variant: s.variant, prompt, n });
      if (r) out.set(s.id, r.tokens);
    }
    return out;
  }

  async close(): Promise<void> {
    for (const r of this.running.values()) await r.process.close().catch(() => undefined);
    this.running.clear();
    rmSync(this.scratch, { recursive: true, force: true });
  }
}
