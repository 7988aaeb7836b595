// Greedy generation: prefill then one token at a time with the KV cache (every sequence of the session in one
// step), or the uncached baseline that recomputes each whole sequence every step.
import { UserError } from "../errors.ts";
import { launchMode, type LaunchMode } from "./launch-modes.ts";
import { positionsLimitOf, type ModelConfig, type ModelWeights } from "../model/architectures.ts";
import { restorePrefix, reusedRows, type KeptPrefix } from "./prefix.ts";
import type { Session as AnySession } from "./session.ts";
import { counted } from "../words.ts";

/** A session of any architecture. */
type Session = AnySession<ModelWeights>;

export interface GenerateOptions {
  /** one prompt per sequence of the session */
  prompts: number[][];
  maxNewTokens: number;
  cache: boolean;
  /** launch mode of the cached decode steps (prefill and the uncached baseline run eagerly) */
  mode: LaunchMode;
  /** a kept prefix every prompt begins with: its rows restored, only the rest of each prompt prefilled */
  prefix?: { kept: KeptPrefix; source: string };
}

export interface GenerateResult {
  promptIds: number[][];
  /** per sequence */
  generatedIds: number[][];
  /** wall time of each step (ms) — every sequence's token — the backend synchronised after each */
  tokenMs: number[];
  /** which step produced each token: "prefill", "decode" or "recompute" */
  tokenKinds: string[];
  /** per sequence: the prompt's rows restored from the prefix (0 without one) */
  reusedRows: number[];
}

const nowMs = () => Bun.nanoseconds() / 1e6;

/** Refuses prompts that with `maxNewTokens` new tokens each would pass the model's positions. */
export function checkPositions(prompts: readonly number[][], maxNewTokens: number, cfg: ModelConfig): void {
  const positions = cfg.n_positions;
  for (const [b, prompt] of prompts.entries()) {
    if (prompt.length === 0) throw new Error("generate: empty prompt");
    const total = prompt.length + maxNewTokens;
    if (total > positions) {
      const which = prompts.length > 1 ? `prompt ${b + 1}` : "prompt";
      throw new UserError(
        `context overflow: ${which} (${counted(prompt.length, "token")}) + new tokens (${maxNewTokens}) = ${total} exceeds the model's ${positionsLimitOf(cfg)}`,
      );
    }
  }
}

/** Generates for every sequence of `session` at once. */
export function generateBatch(session: Session, opts: GenerateOptions): GenerateResult {
  const { prompts, maxNewTokens } = opts;
  if (prompts.length !== session.batch)
    throw new Error(`generate: ${prompts.length} prompts for ${session.batch} sequences`);
  checkPositions(prompts, maxNewTokens, session.config);
  if (opts.prefix && !opts.cache) throw new UserError("a kept prefix is the KV cache's: it needs --cache on");
  return opts.cache ? generateCached(session, opts) : generateUncached(session, opts);
}

/** One sequence (a session of batch 1). */
export function generate(
  session: Session,
  opts: Omit<GenerateOptions, "prompts"> & { prompt: number[] },
): Omit<GenerateResult, "promptIds" | "generatedIds"> & {
  promptIds: number[];
  generatedIds: number[];
} {
  const r = generateBatch(session, { ...opts, prompts: [opts.prompt] });
  return { ...r, promptIds: r.promptIds[0]!, generatedIds: r.generatedIds[0]! };
}

function generateCached(session: Session, { prompts, maxNewTokens, mode, prefix }: GenerateOptions): GenerateResult {
  const reused = prompts.map((p, b) =>
    prefix ? reusedRows(p, prefix.kept, prefix.source, prompts.length > 1 ? b : null) : 0,
  );
  const tokenMs: number[] = [];
  const tokenKinds: string[] = [];
  const timed = (kind: string, work: () => void) => {
    const t0 = nowMs();
    work();
    session.backend.synchronize();
    tokenMs.push(nowMs() - t0);
    tokenKinds.push(kind);
  };
  const where = (b: number) => (prompts.length > 1 ? ` of sequence ${b + 1}` : "");
  // the logits of every step are checked (outside the timing): argmax over NaN would pick token 0 silently
  if (maxNewTokens > 0) {
    // warm: the prefix's rows copied into the cache, then only the rest of the prompt prefilled
    timed("prefill", () => {
      for (const [b, prompt] of prompts.entries()) {
        if (prefix) restorePrefix(session.backend, session.sequenceCache(b), prefix.kept, reused[b]!);
        session.prefill(prompt, b, reused[b]);
      }
    });
    for (const [b, prompt] of prompts.entries())
      session.checkLogits(
        `after the prompt${where(b)} (${counted(prompt.length, "token")})`,
        prompt.length - reused[b]!,
        () => session.setPosition(reused[b]!, b),
        b,
      );
  }
  for (let i = 1; i < maxNewTokens; i++) {
    timed("decode", () => session.run(1, mode));
    const reset = () => {
      for (const [b, prompt] of prompts.entries()) session.setPosition(prompt.length + i - 1, b);
    };
    session.checkLogits(
      `of generated token ${i + 1} (position ${prompts[0]!.length + i - 1}${prompts.length > 1 ? " in sequence 1" : ""})`,
      1,
      reset,
    );
  }
  return collect(session, prompts, maxNewTokens, tokenMs, tokenKinds, reused);
}

function generateUncached(session: Session, { prompts, maxNewTokens }: GenerateOptions): GenerateResult {
  const tokenMs: number[] = [];
  for (const [b, prompt] of prompts.entries()) session.setSequence(prompt, b);
  const eager = launchMode("eager");
  for (let i = 0; i < maxNewTokens; i++) {
    const t0 = nowMs();
    const passes = prompts.map((prompt, b) => session.passes(prompt.length + i, b));
    for (const [b, { steps }] of passes.entries()) {
      session.setPosition(0, b);
      for (const step of steps) eager.run(step, 1);
    }
    session.backend.synchronize();
    tokenMs.push(nowMs() - t0);
    prompts.forEach((prompt, b) => {
      const what = `of generated token ${i + 1}${prompts.length > 1 ? ` of sequence ${b + 1}` : ""} (${prompt.length + i} tokens recomputed)`;
      const { T, pos } = passes[b]!.last;
      session.checkLogits(what, T, () => session.setPosition(pos, b), b);
    });
  }
  return collect(
    session,
    prompts,
    maxNewTokens,
    tokenMs,
    tokenMs.map(() => "recompute"),
    prompts.map(() => 0),
  );
}

function collect(
  session: Session,
  prompts: number[][],
  maxNewTokens: number,
  tokenMs: number[],
  tokenKinds: string[],
  reusedRows: number[],
): GenerateResult {
  const generatedIds = prompts.map((prompt, b) =>
    session.readSequence(prompt.length + maxNewTokens, b).slice(prompt.length),
  );
  return { promptIds: prompts, generatedIds, tokenMs, tokenKinds, reusedRows };
}
