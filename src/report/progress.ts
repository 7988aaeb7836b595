// Progress on stderr: a bar (cli-progress) when the stream is a TTY, otherwise one plain line every
// few seconds, so logs and CI output stay readable; nothing at all when silent. stdout is never used.
import { Presets, SingleBar } from "cli-progress";

export interface ProgressStream {
  isTTY?: boolean;
  write(text: string): boolean;
}

export interface ProgressOptions {
  total: number;
  label: string;
  silent?: boolean;
  /** default: process.stderr */
  stream?: ProgressStream;
  /** plain mode: the least time between two lines (default 5000 ms) */
  plainIntervalMs?: number;
  /** clock in ms (tests) */
  now?: () => number;
  /** when the command started, on that clock: the final line counts from there (setup, e.g. probes, included) */
  startedAt?: number;
}

export interface Progress {
  /** `done` of total finished; `detail` says what runs now (e.g. "graph, context 256") */
  update(done: number, detail?: string): void;
  stop(): void;
}

const DEFAULT_PLAIN_INTERVAL_MS = 5000;

function barProgress(o: ProgressOptions, stream: ProgressStream): Progress {
  const bar = new SingleBar(
    {
      stream: stream as NodeJS.WritableStream,
      format: `${o.label} [{bar}] {value}/{total} | {detail} | eta {eta_formatted}`,
      hideCursor: true,
    },
    Presets.shades_classic,
  );
  bar.start(o.total, 0, { detail: "" });
  return {
    update: (done, detail = "") => bar.update(done, { detail }),
    stop: () => bar.stop(),
  };
}

function plainProgress(o: ProgressOptions, stream: ProgressStream): Progress {
  const now = o.now ?? Date.now;
  const interval = o.plainIntervalMs ?? DEFAULT_PLAIN_INTERVAL_MS;
  const started = o.startedAt ?? now();
  let lastLine = Number.NEGATIVE_INFINITY;
  let last = { done: 0, detail: "" };
  const line = (done: number, detail: string) => {
    const pct = o.total > 0 ? Math.round((100 * done) / o.total) : 100;
    stream.write(`${o.label}: ${done}/${o.total} (${pct}%)${detail ? ` ${detail}` : ""}\n`);
  };
  return {
    update(done, detail = "") {
      last = { done, detail };
      if (now() - lastLine < interval) return;
      lastLine = now();
      line(done, detail);
    },
    stop() {
      const s = (now() - started) / 1000;
      const seconds = s.toFixed(s < 1 ? 2 : 1); // a tiny model's points take hundredths
      const when = o.startedAt === undefined ? ` in ${seconds} s` : `, ${seconds} s after the command started`;
      stream.write(`${o.label}: ${last.done}/${o.total} done${when}\n`);
    },
  };
}

export function createProgress(options: ProgressOptions): Progress {
  if (options.silent) return { update: () => {}, stop: () => {} };
  const stream = options.stream ?? process.stderr;
  return stream.isTTY ? barProgress(options, stream) : plainProgress(options, stream);
}
