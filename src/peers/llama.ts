// The llama.cpp peer: node-llama-cpp (an optional dependency) under Node, as its own process.
import { join } from "node:path";

import { ROOT } from "../native/build.ts";
import { PeerProcess } from "./process.ts";

export const LLAMA_PEER_SCRIPT = join(ROOT, "src/peers/llama_peer.mjs");
const PACKAGE = "node-llama-cpp";

/** Why the llama.cpp peer cannot run here (no Node, or the optional package not installed), or null. */
export function llamaPeerUnavailable(): string | null {
  if (!Bun.which("node", { PATH: process.env.PATH ?? "" }))
    return "node is not on PATH (the llama.cpp peer runs under Node)";
  try {
    Bun.resolveSync(PACKAGE, ROOT);
  } catch {
    return `${PACKAGE} is not installed (an optional dependency: \`npm install\` fetches it with prebuilt llama.cpp binaries)`;
  }
  return null;
}

/** Runs `node args…` in the project root (where node-llama-cpp resolves) and waits for it. */
export function runNodeModule(args: string[]) {
  const r = Bun.spawnSync(["node", ...args], { cwd: ROOT, env: process.env });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

export interface LlamaPeerOptions {
  gguf: string;
  threads: number;
  /** the largest context a sequence must hold (contexts and the agreement check) */
  maxContext: number;
  fillSeed: number;
}

export function startLlamaPeer(o: LlamaPeerOptions) {
  return PeerProcess.start("llama.cpp peer", [
    "node",
    LLAMA_PEER_SCRIPT,
    "--serve",
    "--model",
    o.gguf,
    "--threads",
    String(o.threads),
    "--max-context",
    String(o.maxContext),
    "--fill-seed",
    String(o.fillSeed),
  ]);
}
