// The PyTorch peer: which python has torch, and the peer script (torch_peer.py) started in serve mode.
import { join } from "node:path";

import { ROOT } from "../native/build.ts";
import { PeerProcess } from "./process.ts";

export const TORCH_PEER_SCRIPT = join(ROOT, "src/peers/torch_peer.py");
/** DECODE_FLOOR_PYTHON names the python to use; otherwise the first of these that imports torch */
export const PYTHON_ENV = "DECODE_FLOOR_PYTHON";
const CANDIDATES = ["python3", "/usr/bin/python3"];
export const TORCH_INSTALL_HINT =
  "on Debian `apt-get install python3-torch libopenblas0`, elsewhere `pip install torch`";
/** importing torch takes seconds on a busy machine */
const PROBE_TIMEOUT_MS = 120_000;

export interface TorchPython {
  python: string;
  torch: string;
}

/** The python that imports torch, or one line saying what was tried and how to install it. */
export function findTorchPython(
  env: Record<string, string | undefined> = process.env,
): TorchPython | { missing: string } {
  const chosen = env[PYTHON_ENV];
  const candidates = chosen ? [chosen] : CANDIDATES;
  const tried: string[] = [];
  for (const python of candidates) {
    const found = probe(python, env);
    if ("torch" in found) return found;
    tried.push(`${chosen ? `${PYTHON_ENV}=` : ""}${python}: ${found.problem}`);
  }
  return {
    missing: `no python with torch (${tried.join("; ")}); ${TORCH_INSTALL_HINT}${chosen ? "" : `, or set ${PYTHON_ENV}`}`,
  };
}

function probe(python: string, env: Record<string, string | undefined>): TorchPython | { problem: string } {
  let r: Bun.SyncSubprocess<"pipe", "pipe">;
  try {
    r = Bun.spawnSync([python, "-c", "import sys, torch; print(sys.executable); print(torch.__version__)"], {
      env,
      timeout: PROBE_TIMEOUT_MS,
      stdout: "pipe",
      stderr: "pipe",
    });
  } catch {
    return { problem: "not found" };
  }
  if (r.exitCode !== 0) {
    const lines = r.stderr.toString().trim().split("\n");
    return {
      problem:
        r.exitCode === null ? "timed out importing torch" : (lines[lines.length - 1] ?? `exit ${r.exitCode}`).trim(),
    };
  }
  const [executable, torch] = r.stdout.toString().trim().split("\n");
  return { python: executable ?? python, torch: torch ?? "unknown" };
}

export interface TorchPeerOptions {
  python: string;
  /** a Hugging Face GPT-2 directory */
  modelDir: string;
  device: "cpu" | "cuda";
  threads: number;
  variants: string[];
  /** rows of the static cache: the largest context + 1, or what the agreement check needs */
  cacheRows: number;
  fillSeed: number;
}

/** Starts torch_peer.py --serve; resolves once it has loaded the weights and set up its variants. */
export function startTorchPeer(o: TorchPeerOptions) {
  return PeerProcess.start("PyTorch peer", [
    o.python,
    TORCH_PEER_SCRIPT,
    "--serve",
    "--model",
    o.modelDir,
    "--device",
    o.device,
    "--threads",
    String(o.threads),
    "--variants",
    o.variants.join(","),
    "--cache-rows",
    String(o.cacheRows),
    "--fill-seed",
    String(o.fillSeed),
  ]);
}
