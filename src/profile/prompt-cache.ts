// Prompt caching measured: time to first token for a prompt of a P-token prefix and a short suffix, cold (all
// of it prefilled) against warm (the prefix's keys and values kept from an earlier request, restored from host
// memory or from a prefix file, then only the suffix prefilled), with the bytes kept and both token streams.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { ModelWeights } from "../model/architectures.ts";
import {
  checkPrefixIdentity,
  encodePrefix,
  keepPrefix,
  prefixIdentityOf,
  readPrefixFile,
  restorePrefix,
  type KeptPrefix,
  type PrefixIdentity,
} from "../run/prefix.ts";
import type { Session } from "../run/session.ts";
import { summarize } from "../stats.ts";
import { promptOf } from "./prompts.ts";
import type { PromptCachePoint, PromptCacheSection } from "./types.ts";
import { ms } from "./verdicts.ts";

/** The suffix a warm request prefills after its kept prefix: a short new turn. */
export const PROMPT_CACHE_SUFFIX = 16;
/** Tokens generated after each way of filling, compared token for token. */
export const PROMPT_CACHE_TOKENS = 8;
/** Timed requests per prefix length and way (a cold one at P tokens is a whole prefill). */
export const PROMPT_CACHE_REPEATS = 3;

/** The positions a prompt-cache point at prefix P reaches. */
export const promptCacheContext = (prefix: number) => prefix + PROMPT_CACHE_SUFFIX + PROMPT_CACHE_TOKENS;

/** Without --prompt-cache, the prefixes tried are this and its doublings. */
const AUTO_FIRST_PREFIX = 1024;
/**
 * Without --prompt-cache, the longest cold prefill a prefix may take: about a minute (issue 21: "up to what prefills
 * in about a minute on the CPU"); each prefix is prefilled cold PROMPT_CACHE_REPEATS + 2 times.
 */
export const PROMPT_CACHE_LIMIT_S = 60;

/**
 * The prefix lengths a study times without --prompt-cache: 1024 and its doublings whose prompts fit the `positions`
 * of its largest context and whose cold prefill the work model at the measured rate puts within PROMPT_CACHE_LIMIT_S (each
 * is prefilled cold PROMPT_CACHE_REPEATS times, and twice more for the prefix kept and the tokens compared); none
 * where the study's contexts stay short.
 */
export function autoPrefixes(positions: number, prefillSeconds: (tokens: number) => number): number[] {
  const prefixes: number[] = [];
  for (let P = AUTO_FIRST_PREFIX; promptCacheContext(P) <= positions; P *= 2)
    if (prefillSeconds(P + PROMPT_CACHE_SUFFIX) <= PROMPT_CACHE_LIMIT_S) prefixes.push(P);
  return prefixes;
}

/** Why autoPrefixes chose none: its first prefix does not fit, or its cold prefill would take too long. */
export function noAutoPrefixReason(positions: number, prefillSeconds: (tokens: number) => number): string {
  const P = AUTO_FIRST_PREFIX;
  if (promptCacheContext(P) > positions)
    return `a ${P}-token prefix with its suffix and generated tokens needs ${promptCacheContext(P)} positions, and the study's largest context holds ${positions}`;
  const s = prefillSeconds(P + PROMPT_CACHE_SUFFIX);
  return `a ${P}-token prefix's cold prefill would take ${s.toFixed(1)} s at the measured prefill rate, over ${PROMPT_CACHE_LIMIT_S} s`;
}

/** How autoPrefixes chooses. */
export const AUTO_PREFIXES_RULE = `${AUTO_FIRST_PREFIX} and its doublings within the study's largest context whose cold prefill the work model at the measured prefill rate puts under ${PROMPT_CACHE_LIMIT_S} s`;

export const PROMPT_CACHE_HOW = `a prompt of P prefix tokens and ${PROMPT_CACHE_SUFFIX} more, time to first token (the prompt's eager prefill until its token is known), median of ${PROMPT_CACHE_REPEATS}: cold prefills all of it; warm from memory copies the prefix's keys and values (kept on the host from an earlier request) into the cache and prefills the ${PROMPT_CACHE_SUFFIX}; warm from a file first reads the prefix file (from the OS page cache once written, into a host buffer reused across requests) and checks its config, storage types and weights hash (the weights hashed once, and the file's rows once after it is written, outside the timing); the ${PROMPT_CACHE_TOKENS} tokens after each must be the same`;

const nowMs = () => Bun.nanoseconds() / 1e6;

/** Times cold and warm first tokens at every prefix length, in `session`'s sequence 0 (`chosen`: how, where the run chose them). */
export async function measurePromptCache(
  session: Session<ModelWeights>,
  prefixes: number[],
  opts: { seed: number; onPrefix?: (prefix: number) => void; checkpoint: () => Promise<void>; chosen?: string },
): Promise<PromptCacheSection> {
  const identity = prefixIdentityOf(session);
  const dir = mkdtempSync(join(tmpdir(), "decode-floor-prefix-"));
  try {
    const points: PromptCachePoint[] = [];
    for (const P of prefixes) {
      opts.onPrefix?.(P);
      points.push(await measurePrefix(session, identity, P, join(dir, `${P}.prefix`), opts));
    }
    return {
      suffix_tokens: PROMPT_CACHE_SUFFIX,
      new_tokens: PROMPT_CACHE_TOKENS,
      repeats: PROMPT_CACHE_REPEATS,
      how: opts.chosen ? `${PROMPT_CACHE_HOW}; ${opts.chosen}` : PROMPT_CACHE_HOW,
      points,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One prefix length; a Ctrl-C stops it between two starts (a cold one at a long prefix takes seconds). */
async function measurePrefix(
  session: Session<ModelWeights>,
  identity: PrefixIdentity,
  P: number,
  file: string,
  opts: { seed: number; checkpoint: () => Promise<void> },
): Promise<PromptCachePoint> {
  const prompt = promptOf(P + PROMPT_CACHE_SUFFIX, session.config.vocab_size, opts.seed);
  const cache = session.sequenceCache(0);
  const firstToken = (start: () => void) => {
    session.backend.synchronize();
    const t0 = nowMs();
    start();
    session.backend.synchronize();
    return nowMs() - t0;
  };
  const cold = () => session.prefill(prompt);
  // the earlier request that leaves the prefix behind: a cold start of the same prompt
  cold();
  const kept = keepPrefix(session.backend, cache, identity, prompt.slice(0, P));
  const fileBytes = encodePrefix(kept);
  writeFileSync(file, fileBytes);
  readPrefixFile(file); // its file_sha256 checked once here: the timed reads trust the file they just wrote
  const fromMemory = (prefix: KeptPrefix) => {
    restorePrefix(session.backend, cache, prefix, P);
    session.prefill(prompt, 0, P);
  };
  let readInto: Uint8Array | undefined;
  const fromFile = () => {
    const read = readPrefixFile(file, { rowsInto: readInto, checkHash: false });
    readInto = read.rows;
    checkPrefixIdentity(read, identity, file);
    fromMemory(read);
  };
  const ways = { cold, memory: () => fromMemory(kept), file: fromFile };
  const streams: Record<string, number[]> = {};
  for (const [name, start] of Object.entries(ways)) {
    await opts.checkpoint();
    streams[name] = streamAfter(session, start, prompt.length);
  }
  const samples = { cold: [] as number[], memory: [] as number[], file: [] as number[] };
  // interleaved, so drift on the machine falls on every way alike
  for (let r = 0; r < PROMPT_CACHE_REPEATS; r++)
    for (const [name, start] of Object.entries(ways)) {
      await opts.checkpoint();
      samples[name as keyof typeof ways].push(firstToken(start));
    }
  const same = (a: number[], b: number[]) => a.length === b.length && a.every((t, i) => t === b[i]);
  return {
    prefix_tokens: P,
    bytes_kept: kept.rows.length,
    file_bytes: fileBytes.length,
    cold_ttft_ms: summarize(samples.cold),
    warm_memory_ttft_ms: summarize(samples.memory),
    warm_file_ttft_ms: summarize(samples.file),
    streams_identical: same(streams.memory!, streams.cold!) && same(streams.file!, streams.cold!),
  };
}

/** The tokens greedy decoding gives after `start` fills the cache for a prompt of `length` tokens. */
function streamAfter(session: Session<ModelWeights>, start: () => void, length: number): number[] {
  start();
  for (let i = 1; i < PROMPT_CACHE_TOKENS; i++) session.run(1);
  session.backend.synchronize();
  return session.readSequence(length + PROMPT_CACHE_TOKENS).slice(length);
}

/**
 * The section's sentence at its longest prefix: how much a kept prefix cut the first token's wait, what it costs
 * to keep, and whether the tokens after it were the same.
 */
export function promptCacheVerdict(section: PromptCacheSection): string {
  const p = section.points.reduce((a, b) => (b.prefix_tokens > a.prefix_tokens ? b : a));
  const cold = p.cold_ttft_ms.median;
  const memory = p.warm_memory_ttft_ms.median;
  const file = p.warm_file_ttft_ms.median;
  const same = section.points.every((q) => q.streams_identical)
    ? `the ${section.new_tokens} tokens after it were the same at every prefix`
    : `the tokens after a warm start DIFFERED from a cold one at ${section.points
        .filter((q) => !q.streams_identical)
        .map((q) => q.prefix_tokens)
        .join(", ")} prefix tokens`;
  return (
    `Prompt caching: with a ${p.prefix_tokens}-token prefix kept (${(p.bytes_kept / 1e6).toPrecision(3)} MB of keys and values), ` +
    `the first token came ${soonerOrLater(cold, memory)} from memory (${ms(cold)} → ${ms(memory)}) and ` +
    `${soonerOrLater(cold, file)} from a file (${ms(file)}); ${same}.`
  );
}

const soonerOrLater = (cold: number, warm: number) =>
  warm <= cold ? `${(cold / warm).toFixed(1)}× sooner` : `${(warm / cold).toFixed(1)}× later`;
