// Greedy generation: prefill then one token at a time with the KV cache, or the uncached baseline that
// recomputes the whole sequence every step.
import { UserError } from "../errors.ts";
import type { LaunchMode } from "./launch-modes.ts";
import type { Session } from "./session.ts";

export interface GenerateOptions {
  prompt: number[];
  maxNewTokens: number;
  cache: boolean;
  /** launch mode of the cached decode steps (prefill and the uncached baseline run eagerly) */
  mode: LaunchMode;
}

export interface GenerateResult {
  promptIds: number[];
  generatedIds: number[];
  /** wall time of each generated token (ms), the backend synchronised after each */
  tokenMs: number[];
  /** which step produced each token: "prefill", "decode" or "recompute" */
  tokenKinds: string[];
}

const nowMs = () => Bun.nanoseconds() / 1e6;

export function generate(session: Session, opts: GenerateOptions): GenerateResult {
  const { prompt, maxNewTokens } = opts;
  if (prompt.length === 0) throw new Error("generate: empty prompt");
  const total = prompt.length + maxNewTokens;
  if (total > session.config.n_positions) {
    throw new UserError(`context overflow: prompt (${prompt.length} tokens) + new tokens (${maxNewTokens}) = ${total} exceeds n_positions (${session.config.n_positions})`);
  }
  return opts.cache ? generateCached(session, opts) : generateUncached(session, opts);
}

function generateCached(session: Session, { prompt, maxNewTokens, mode }: GenerateOptions): GenerateResult {
  const tokenMs: number[] = [];
  const tokenKinds: string[] = [];
  const timed = (kind: string, work: () => void) => {
    const t0 = nowMs();
    work();
    session.backend.synchronize();
    tokenMs.push(nowMs() - t0);
    tokenKinds.push(kind);
  };
  // the logits of every step are checked (outside the timing): argmax over NaN would pick token 0 silently
  if (maxNewTokens > 0) {
    timed("prefill", () => session.prefill(prompt));
    session.checkLogits(`after the prompt (${prompt.length} tokens)`, prompt.length, () => session.setPosition(0));
  }
  for (let i = 1; i < maxNewTokens; i++) {
    timed("decode", () => session.run(1, mode));
    const position = prompt.length + i - 1;
    session.checkLogits(`of generated token ${i + 1} (position ${position})`, 1, () => session.setPosition(position));
  }
  const ids = session.readSequence(prompt.length + maxNewTokens);
  return { promptIds: prompt, generatedIds: ids.slice(prompt.length), tokenMs, tokenKinds };
}

function generateUncached(session: Session, { prompt, maxNewTokens }: GenerateOptions): GenerateResult {
  const tokenMs: number[] = [];
  session.setSequence(prompt);
  for (let i = 0; i < maxNewTokens; i++) {
    const t0 = nowMs();
    session.setPosition(0);
    session.run(prompt.length + i);
    session.backend.synchronize();
    tokenMs.push(nowMs() - t0);
    session.checkLogits(`of generated token ${i + 1} (${prompt.length + i} tokens recomputed)`, prompt.length + i, () => session.setPosition(0));
  }
  const ids = session.readSequence(prompt.length + maxNewTokens);
  return { promptIds: prompt, generatedIds: ids.slice(prompt.length), tokenMs, tokenKinds: tokenMs.map(() => "recompute") };
}
