#!/usr/bin/env node
// The llama.cpp peer of the decode-floor study, through node-llama-cpp (an optional dependency). It runs
// under Node, as its own process: a native crash here costs the peer, never the study.
//
// Variants: llama.cpp's single-token decode of a GPT-2 GGUF (all F32, written by src/peers/gguf-gpt2.ts)
// with an F32 KV cache, flash attention off ("fa-off") and on ("fa-on"), each in its own context.
// Per context c a sequence really holds c tokens (a prefill of c prompt tokens); decode steps at
// position c are timed (performance.now around one awaited evaluation), the token erased after each.
//
//   node llama_peer.mjs --model FILE.gguf [--threads N] [--contexts 8,128] [--repeats N] [--warmup N]
//                       [--prompt-ids 1,2,3] [--new-tokens 20] [--fill-seed 0]   → one JSON object on stdout
//   node llama_peer.mjs --model FILE.gguf --max-context N --serve               → JSON lines, as torch_peer.py
//
// Errors: one line `error: ...` on stderr, exit 1.
import { existsSync, readFileSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const VARIANTS = {
  "fa-off": { short: "llama.cpp FA off", label: "llama.cpp, flash attention off", flash: false },
  "fa-on": { short: "llama.cpp FA on", label: "llama.cpp, flash attention on", flash: true },
};

class PeerError extends Error {}

/** The project's deterministic prompt (src/profile/study.ts promptOf). */
function fillPrompt(n, vocab, seed) {
  return Array.from({ length: n }, (_, i) => (Math.imul(i + 1 + seed, 2654435761) >>> 0) % vocab);
}

const oneLine = (e) =>
  String(e?.message ?? e)
    .split(/\s+/)
    .join(" ")
    .slice(0, 300);
const greedy = { generateNext: { token: true, options: { temperature: 0 } } };

async function importNodeLlamaCpp() {
  try {
    return await import("node-llama-cpp");
  } catch (e) {
    throw new PeerError(
      `node-llama-cpp is not installed or does not load (${oneLine(e)}): it is an optional dependency; \`npm install\` fetches it with its prebuilt llama.cpp binaries`,
    );
  }
}

class LlamaPeer {
  static async open({ model, threads, maxContext, fillSeed }) {
    const nlc = await importNodeLlamaCpp();
    const logger = (level, message) => {
      if (level === nlc.LlamaLogLevel.error || level === nlc.LlamaLogLevel.fatal)
        process.stderr.write(`llama.cpp: ${message.trim()}\n`);
    };
    let llama, loaded;
    try {
      llama = await nlc.getLlama({
        gpu: false,
        build: "never",
        maxThreads: 0,
        logLevel: nlc.LlamaLogLevel.error,
        logger,
        progressLogs: false,
      });
      loaded = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
    } catch (e) {
      throw new PeerError(`llama.cpp could not load ${model}: ${oneLine(e)}`);
    }
    const peer = new LlamaPeer(nlc, llama, loaded, threads, maxContext, fillSeed);
    for (const [name, v] of Object.entries(VARIANTS)) {
      const context = await loaded.createContext({
        contextSize: maxContext + 1,
        sequences: 1,
        flashAttention: v.flash,
        threads: { ideal: threads, min: threads },
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
        batching: { dispatchSchedule: (dispatch) => dispatch() }, // no wait for the next event-loop turn
      });
      peer.variants.set(name, { context, sequence: context.getSequence(), next: null });
    }
    return peer;
  }

  constructor(nlc, llama, model, threads, maxContext, fillSeed) {
    Object.assign(this, { nlc, llama, model, threads, maxContext, fillSeed });
    this.variants = new Map();
    this.context = null;
    const embedding = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
    if (!embedding) throw new PeerError("the GGUF file has no token_embd.weight");
    this.vocab = Number(embedding.dimensions[1]); // ggml dims: [n_embd, n_vocab]
  }

  info() {
    const release = this.llama.llamaCppRelease;
    return {
      peer: "llama.cpp",
      node_llama_cpp: packageVersion("node-llama-cpp"),
      llama_cpp: `${release.repo} ${release.release}`,
      build: this.llama.buildType,
      node: process.version,
      device: "cpu",
      device_name: cpus()[0]?.model ?? "CPU",
      threads: this.threads,
      timing:
        "performance.now around one awaited single-token evaluation (node-llama-cpp → llama_decode → greedy sampling)",
      variants: [...this.variants].map(([name, v]) => ({
        name,
        short: VARIANTS[name].short,
        label: VARIANTS[name].label,
        available: true,
        settings: {
          dtype: "float32 weights (GGUF all F32)",
          threads: this.threads,
          cache: `${this.nlc.GgmlType[v.context.kvCacheKeyType]} K, ${this.nlc.GgmlType[v.context.kvCacheValueType]} V`,
          flash_attention: v.context.flashAttention,
          context_size: v.context.contextSize,
          step: "one token through llama_decode, next token by greedy sampling; erased again after each timed step",
        },
      })),
    };
  }

  variant(name) {
    const v = this.variants.get(name);
    if (!v) throw new PeerError(`unknown variant ${name} (variants: ${[...this.variants.keys()].join(", ")})`);
    return v;
  }

  async fill(context) {
    if (!(context >= 1 && context <= this.maxContext))
      throw new PeerError(`context ${context} is outside 1..${this.maxContext}`);
    const prompt = fillPrompt(context, this.vocab, this.fillSeed);
    const next = {};
    for (const [name, v] of this.variants) {
      await v.sequence.clearHistory();
      const out = await v.sequence.controlledEvaluate(
        prompt.map((t, i) => (i === prompt.length - 1 ? [t, greedy] : t)),
      );
      v.next = out[prompt.length - 1].next.token;
      next[name] = v.next;
    }
    this.context = context;
    return next;
  }

  async time(name, steps, warmup = 0) {
    const v = this.variant(name);
    if (this.context === null) throw new PeerError("fill a context before timing");
    const samples = [];
    for (let i = 0; i < warmup + steps; i++) {
      const t0 = performance.now();
      await v.sequence.controlledEvaluate([[v.next, greedy]]);
      const ms = performance.now() - t0;
      await v.sequence.eraseContextTokenRanges([{ start: this.context, end: this.context + 1 }]);
      if (i >= warmup) samples.push(ms);
    }
    return samples;
  }

  async generate(name, prompt, n) {
    const v = this.variant(name);
    if (prompt.length + n > this.maxContext + 1)
      throw new PeerError(`prompt (${prompt.length}) + ${n} tokens exceed the context of ${this.maxContext + 1}`);
    await v.sequence.clearHistory();
    this.context = null;
    let out = await v.sequence.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, greedy] : t)));
    const tokens = [out[prompt.length - 1].next.token];
    while (tokens.length < n) {
      out = await v.sequence.controlledEvaluate([[tokens[tokens.length - 1], greedy]]);
      tokens.push(out[0].next.token);
    }
    return tokens;
  }

  async close() {
    for (const v of this.variants.values()) await v.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }
}

/** A package's version from the package.json above its entry point (its exports hide package.json). */
function packageVersion(name) {
  for (let dir = dirname(fileURLToPath(import.meta.resolve(name))); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, "package.json");
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, "utf8"));
      if (pkg.name === name) return pkg.version;
    }
  }
  return "unknown";
}

function intList(name, text) {
  const values = text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map(Number);
  if (!values.length || values.some((v) => !Number.isInteger(v) || v < 0))
    throw new PeerError(`--${name}: ${JSON.stringify(text)} is not a comma-separated list of non-negative integers`);
  return values;
}

function positive(name, text, min = 1) {
  const v = Number(text);
  if (!Number.isInteger(v) || v < min) throw new PeerError(`--${name} must be an integer ≥ ${min} (got ${text})`);
  return v;
}

function parse(argv) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        model: { type: "string" },
        threads: { type: "string" },
        contexts: { type: "string" },
        repeats: { type: "string" },
        warmup: { type: "string" },
        "prompt-ids": { type: "string" },
        "new-tokens": { type: "string" },
        "fill-seed": { type: "string" },
        "max-context": { type: "string" },
        serve: { type: "boolean" },
      },
    }));
  } catch (e) {
    throw new PeerError(oneLine(e));
  }
  if (!values.model) throw new PeerError("--model FILE.gguf is required");
  const contexts = intList("contexts", values.contexts ?? "8");
  const promptIds = values["prompt-ids"] ? intList("prompt-ids", values["prompt-ids"]) : null;
  const newTokens = positive("new-tokens", values["new-tokens"] ?? "20");
  const need = Math.max(Math.max(...contexts), (promptIds?.length ?? 8) + newTokens - 1);
  return {
    model: values.model,
    threads: positive("threads", values.threads ?? String(cpus().length)),
    contexts,
    promptIds,
    newTokens,
    repeats: positive("repeats", values.repeats ?? "10"),
    warmup: positive("warmup", values.warmup ?? "2", 0),
    fillSeed: positive("fill-seed", values["fill-seed"] ?? "0", 0),
    maxContext: values["max-context"] ? positive("max-context", values["max-context"]) : need,
    serve: values.serve ?? false,
  };
}

/** Every context: fill, then each variant's steps interleaved (A B A B …); then the agreement tokens. */
async function runOnce(peer, args) {
  const prompt = args.promptIds ?? fillPrompt(8, peer.vocab, args.fillSeed);
  const points = [];
  for (const c of args.contexts) {
    await peer.fill(c);
    const samples = new Map([...peer.variants.keys()].map((v) => [v, []]));
    for (const v of samples.keys()) await peer.time(v, 0, args.warmup);
    for (let r = 0; r < args.repeats; r++) for (const [v, s] of samples) s.push(...(await peer.time(v, 1)));
    for (const [v, s] of samples) points.push({ variant: v, context: c, samples_ms: s });
  }
  const generated = {};
  for (const v of peer.variants.keys()) generated[v] = await peer.generate(v, prompt, args.newTokens);
  return { ...peer.info(), prompt_ids: prompt, generated, points };
}

/** JSON lines, the same commands as torch_peer.py's --serve (no trace: llama.cpp has no op profiler here). */
async function serve(peer) {
  const reply = (obj) => process.stdout.write(`${JSON.stringify("ok" in obj ? obj : { ok: true, ...obj })}\n`);
  const commands = {
    info: async () => peer.info(),
    fill: async (q) => ({ next_tokens: await peer.fill(Number(q.context)) }),
    time: async (q) => ({ samples_ms: await peer.time(q.variant, Number(q.steps ?? 1), Number(q.warmup ?? 0)) }),
    generate: async (q) => ({ tokens: await peer.generate(q.variant, q.prompt.map(Number), Number(q.n)) }),
  };
  reply(peer.info());
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    try {
      const q = JSON.parse(line);
      if (q.cmd === "quit") break;
      const handler = commands[q.cmd];
      if (!handler) throw new PeerError(`unknown command ${JSON.stringify(q.cmd)}`);
      reply(await handler(q));
    } catch (e) {
      reply({ ok: false, error: oneLine(e) });
    }
  }
}

async function main() {
  try {
    const args = parse(process.argv.slice(2));
    const peer = await LlamaPeer.open(args);
    if (args.serve) await serve(peer);
    else process.stdout.write(`${JSON.stringify(await runOnce(peer, args))}\n`);
    await peer.close();
    return 0;
  } catch (e) {
    if (!(e instanceof PeerError)) throw e;
    process.stderr.write(`error: ${e.message}\n`);
    return 1;
  }
}

process.exitCode = await main();
