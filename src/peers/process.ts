// A peer of the study running as its own process (Python for PyTorch, Node for llama.cpp), spoken to in
// JSON lines: it greets with its info, then answers one command per line. A peer that dies or answers
// with an error fails with one line; the study goes on without it.

/** One way a peer runs the decode step (e.g. PyTorch's seed-style eager step, llama.cpp with flash attention). */
export interface PeerVariant {
  name: string;
  /** for tables and plot legends: "PyTorch seed-style", "llama.cpp FA on" */
  short: string;
  label: string;
  available: boolean;
  /** why it is not available */
  reason?: string;
  settings?: Record<string, string | number | boolean>;
}

/** What a peer says about itself on start (the fields both peers share; each adds its own). */
export interface PeerInfo {
  peer: string;
  device: string;
  device_name: string;
  threads: number;
  timing: string;
  variants: PeerVariant[];
  [key: string]: unknown;
}

/** Where one traced step of a peer goes (PyTorch's seed-style step under torch.profiler). */
export interface PeerDispatchSplit {
  context: number;
  /** what ops_per_step counts: "torch calls" (Python → dispatcher) on the CPU, "kernel launches" on the GPU */
  unit: string;
  ops_per_step: number;
  /** calls into torch Python makes per step (functions and tensor methods) */
  torch_calls: number;
  step_ms: number;
  /** host time issuing the step: on the CPU the time between ops (interpreter, bindings), on the GPU the whole issue */
  host_issue_ms: number;
  /** of which inside launch calls (GPU) */
  launch_api_ms: number;
  /** union of the ops (CPU) or kernels (GPU) */
  busy_ms: number;
  idle_ms: number;
}
/** A peer failed: one line, naming the peer. */
export class PeerFailure extends Error {
  override name = "PeerFailure";
}

const oneLine = (s: string) => s.split(/\s+/).join(" ").trim();
/** a peer that says nothing for this long is stuck: starting may compile (torch.compile), a command fills or times */
const START_TIMEOUT_MS = 15 * 60_000;
const REQUEST_TIMEOUT_MS = 5 * 60_000;

/** `promise`'s value, or null after `ms`; the timer is cleared either way, so it never holds the process open. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export class PeerProcess {
  private buffered = "";
  private stderrText = "";
  private readonly lines: AsyncIterator<string>;
  /** resolves when stderr has been read to its end (the process exited) */
  private readonly stderrRead: Promise<void>;
  private exited = false;

  private constructor(
    readonly name: string,
    private readonly proc: Bun.Subprocess<"pipe", "pipe", "pipe">,
  ) {
    this.lines = this.readLines();
    this.stderrRead = this.collectStderr();
    void proc.exited.then(() => (this.exited = true));
  }

  /** Starts `cmd` and waits for its greeting (its PeerInfo). */
  static async start(
    name: string,
    cmd: string[],
    env: Record<string, string | undefined> = process.env,
  ): Promise<{ peer: PeerProcess; info: PeerInfo }> {
    let proc: Bun.Subprocess<"pipe", "pipe", "pipe">;
    try {
      proc = Bun.spawn(cmd, { stdin: "pipe", stdout: "pipe", stderr: "pipe", env });
    } catch (e) {
      throw new PeerFailure(`${name}: cannot start ${cmd[0]} (${oneLine((e as Error).message)})`);
    }
    const peer = new PeerProcess(name, proc);
    const info = await peer.next<PeerInfo>(START_TIMEOUT_MS);
    return { peer, info };
  }

  private async *readLines(): AsyncGenerator<string> {
    const decoder = new TextDecoder();
    for await (const chunk of this.proc.stdout) {
      this.buffered += decoder.decode(chunk, { stream: true });
      for (let nl = this.buffered.indexOf("\n"); nl >= 0; nl = this.buffered.indexOf("\n")) {
        const line = this.buffered.slice(0, nl);
        this.buffered = this.buffered.slice(nl + 1);
        if (line.trim()) yield line;
      }
    }
  }

  private async collectStderr(): Promise<void> {
    const decoder = new TextDecoder();
    for await (const chunk of this.proc.stderr)
      this.stderrText = (this.stderrText + decoder.decode(chunk, { stream: true })).slice(-4096);
  }

  /** The peer's own `error: …` line, or its last line of stderr. */
  private async why(): Promise<string> {
    await within(this.proc.exited, 200);
    if (this.exited) await within(this.stderrRead, 1000); // its last words may still be in the pipe
    const lines = this.stderrText
      .split("\n")
      .map((l) => l.trim())
      .filter(Boolean);
    const error = lines.find((l) => l.startsWith("error:"));
    const code = this.exited ? ` (exit ${this.proc.exitCode})` : "";
    return `${oneLine((error ?? lines[lines.length - 1] ?? "no output").replace(/^error:\s*/, ""))}${code}`;
  }

  private async next<T>(timeoutMs: number): Promise<T> {
    const r = await within(this.lines.next(), timeoutMs);
    if (r === null) {
      this.proc.kill();
      throw new PeerFailure(`${this.name}: no answer in ${timeoutMs / 1000} s; stopped it`);
    }
    if (r.done) throw new PeerFailure(`${this.name}: ${await this.why()}`);
    let reply: { ok?: boolean; error?: string };
    try {
      reply = JSON.parse(r.value);
    } catch {
      throw new PeerFailure(`${this.name}: answered ${JSON.stringify(r.value.slice(0, 120))}, not JSON`);
    }
    if (reply.ok === false) throw new PeerFailure(`${this.name}: ${reply.error ?? "failed"}`);
    delete reply.ok; // the protocol's, not the answer's
    return reply as T;
  }

  /** Sends one command and waits for its answer. */
  async request<T>(command: Record<string, unknown>): Promise<T> {
    if (this.exited) throw new PeerFailure(`${this.name}: ${await this.why()}`);
    this.proc.stdin.write(`${JSON.stringify(command)}\n`);
    await this.proc.stdin.flush();
    return this.next<T>(REQUEST_TIMEOUT_MS);
  }

  async close(): Promise<void> {
    if (!this.exited) {
      this.proc.stdin.write(`${JSON.stringify({ cmd: "quit" })}\n`);
      await this.proc.stdin.end();
      if ((await within(this.proc.exited, 10_000)) === null) this.proc.kill();
    }
    await this.proc.exited;
  }
}
