// What the commands share: the model source, the backend flag, and colour handling.
import { closeSync, existsSync, openSync, statSync } from "node:fs";
import { resolve } from "node:path";

import type { Argv } from "yargs";

import { UserError } from "../errors.ts";
import { parameterCount, PRESETS } from "../model/config.ts";
import { loadModel, randomWeights, type GPT2Weights } from "../model/weights.ts";

export const DEFAULT_PRESET = "gpt2";
export const PRESET_CHOICES = Object.keys(PRESETS);

/**
 * `--model DIR` loads a Hugging Face checkpoint; without it, a preset's exact shapes (GPT-2 small by default)
 * with seeded random weights, stated on stderr.
 */
export function loadWeights(modelDir: string | undefined, preset: string, seed: number, say: (line: string) => void): GPT2Weights {
  if (modelDir) {
    const w = loadModel(modelDir);
    const skipped = w.skipped.tensors
      ? `; skipped ${w.skipped.tensors} buffers (${(w.skipped.bytes / 2 ** 20).toFixed(1)} MiB: causal masks / tied lm_head)`
      : "";
    say(`model: ${w.config.name} from ${w.source}${skipped}`);
    return w;
  }
  const cfg = PRESETS[preset];
  if (!cfg) throw new UserError(`unknown preset ${preset} (presets: ${PRESET_CHOICES.join(", ")})`);
  const millions = Math.round(parameterCount(cfg) / 1e6);
  say(`model: ${cfg.name} shapes (${millions}M) with seeded random weights (seed ${seed}) — no --model given; timing does not depend on the values`);
  return randomWeights(cfg, seed);
}

/** yargs .check(): every flag at most once (yargs would make a repeated flag an array); `lists` are meant to be arrays. */
export function noRepeatedFlags(argv: Record<string, unknown>, lists: readonly string[] = []): true {
  const repeated = Object.entries(argv).find(([key, value]) => key !== "_" && !lists.includes(key) && Array.isArray(value));
  if (repeated) throw new UserError(`--${repeated[0]} is given ${(repeated[1] as unknown[]).length} times; give it once`);
  return true;
}

/** Parses an integer flag with bounds, as one clear line on error. */
export function intFlag(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new UserError(`--${name} must be an integer in ${min}..${max === Number.MAX_SAFE_INTEGER ? "∞" : max} (got ${String(value)})`);
  }
  return n;
}

/** yargs' .fail(): its message (often several lines) as one UserError line. */
export function failOnBadFlags(msg: string | null, err: Error | undefined): never {
  if (err) throw err;
  throw new UserError((msg ?? "bad arguments").replace(/\s*\n\s*/g, " ").trim());
}

/** An output file's place is checked before any work, so a bad path loses nothing. */
export function checkWritableFile(flag: string, path: string): string {
  const full = resolve(path);
  if (existsSync(full) && statSync(full).isDirectory()) throw new UserError(`--${flag} ${path} is a directory, not a file`);
  try {
    closeSync(openSync(full, "a")); // opened for appending: created if missing, contents kept until the real write
  } catch (e) {
    throw new UserError(`--${flag} ${path} cannot be written: ${(e as Error).message.split("\n")[0]}`);
  }
  return full;
}

/** Every command's flag rules: unknown flags and repeated flags (other than the `lists` positionals) are errors, as one line each. */
export function parseFlags<T>(flags: Argv<T>, lists: readonly string[] = []) {
  return flags.strict().check((argv) => noRepeatedFlags(argv, lists)).help().fail(failOnBadFlags).parse();
}
