// What the commands share: the model source, the backend flag, and colour handling.
import type { Argv } from "yargs";
import { hideBin } from "yargs/helpers";

import { freemem } from "node:os";
import { UserError } from "../errors.ts";
import {
  ALL_PRESETS,
  loadAnyModel,
  parameterCountOf,
  largestContextOf,
  positionsLimitOf,
  randomWeightsOf,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import { DTYPE_BYTES, DTYPE_NAMES, type DtypeName } from "../ops.ts";

export const DEFAULT_PRESET = "gpt2";
/** The seed of a preset's random weights where --seed is not given. */
export const DEFAULT_SEED = 0;
/** --preset's help, every command's that loads a model. */
export const PRESET_FLAG_HELP = `without --model: whose exact shapes the seeded random weights take (default ${DEFAULT_PRESET})`;
/** --model's help, every command's. */
export const MODEL_FLAG_HELP =
  "Hugging Face checkpoint directory (config.json + model.safetensors or its shards; GPT-2 or the Llama family); default: GPT-2 small shapes, seeded random weights";
export const PRESET_CHOICES = Object.keys(ALL_PRESETS);

/**
 * `--model DIR` loads a Hugging Face checkpoint of any supported architecture; without it, a preset's exact shapes
 * (GPT-2 small by default) with seeded random weights, stated on stderr.
 */
export function loadAnyWeights(
  modelDir: string | undefined,
  preset: string,
  seed: number,
  say: (line: string) => void,
): ModelWeights {
  if (modelDir) {
    const w = loadAnyModel(modelDir);
    const skipped = w.skipped.tensors
      ? `; skipped ${w.skipped.tensors} buffers (${(w.skipped.bytes / 2 ** 20).toFixed(1)} MiB: causal masks / tied lm_head)`
      : "";
    say(`model: ${w.config.name} from ${w.source}${skipped}`);
    return w;
  }
  const cfg = ALL_PRESETS[preset];
  if (!cfg) throw new UserError(`unknown preset ${preset} (presets: ${PRESET_CHOICES.join(", ")})`);
  say(
    `model: ${cfg.name} shapes (${parameterCountOf(cfg).toLocaleString("en-US")} parameters) with seeded random weights (seed ${seed}) — no --model given; timing does not depend on the values`,
  );
  return randomWeightsOf(cfg, seed);
}

/** What the weights take on a backend, every parameter counted in `dtype` (vectors, kept fp32, are well under 1%). */
function storedBytes(cfg: ModelConfig, dtype: DtypeName): number {
  return parameterCountOf(cfg) * DTYPE_BYTES[dtype];
}

/**
 * Refuses weights that do not fit the host's free memory, naming a storage type that would (as `flag` takes it;
 * null for a command that runs `dtype` only, which is told to take a smaller model).
 */
export function checkHostMemory(
  cfg: ModelConfig,
  dtype: DtypeName,
  free = freemem(),
  flag: string | null = "--dtype",
): void {
  const need = storedBytes(cfg, dtype);
  if (need <= free) return;
  const fits = DTYPE_NAMES.filter((d) => storedBytes(cfg, d) <= free);
  const gb = (n: number) => `${(n / 1e9).toFixed(1)} GB`;
  const remedy =
    flag === null
      ? `: it times ${dtype} weights only; give a smaller --preset or --model`
      : fits.length
        ? `: use ${flag} ${fits[0]}`
        : "";
  throw new UserError(
    `${cfg.name} in ${dtype} is ${gb(need)} of weights, more than this machine's ${gb(free)} of free memory${remedy}`,
  );
}

/** yargs .check(): every flag at most once (yargs would make a repeated flag an array); `lists` are meant to be arrays. */
export function noRepeatedFlags(argv: Record<string, unknown>, lists: readonly string[] = []): true {
  const camel = (flag: string) => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
  const listed = new Set([...lists, ...lists.map(camel)]);
  const repeated = Object.entries(argv).find(([key, value]) => key !== "_" && !listed.has(key) && Array.isArray(value));
  if (repeated)
    throw new UserError(`--${repeated[0]} is given ${(repeated[1] as unknown[]).length} times; give it once`);
  return true;
}

/** Parses an integer flag with bounds, as one clear line on error. */
export function intFlag(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new UserError(
      `--${name} must be an integer in ${min}..${max === Number.MAX_SAFE_INTEGER ? "∞" : max} (got ${String(value)})`,
    );
  }
  return n;
}

/**
 * --contexts as given: positive integers that a cached step can run at (one at context c writes position c <
 * n_positions), each once, ascending.
 */
export function parseContexts(flag: string, cfg: ModelConfig): number[] {
  const max = largestContextOf(cfg);
  const values = flag.split(",").map((text) => {
    const s = text.trim();
    const n = Number(s);
    if (!/^\d+$/.test(s) || n < 1)
      throw new UserError(`--contexts: ${JSON.stringify(s)} is not a positive integer (e.g. --contexts 8,64,512)`);
    if (n > max)
      throw new UserError(
        `--contexts: ${n} is impossible for this model: a cached step at context c writes position c, and the model has ${positionsLimitOf(cfg)}: its largest context is ${max}`,
      );
    return n;
  });
  return [...new Set(values)].sort((a, b) => a - b);
}

/** yargs' .fail(): its message (often several lines) as one UserError line, a bad choice in the flag's own words. */
export function failOnBadFlags(msg: string | null, err: Error | undefined, positionals: readonly string[] = []): never {
  if (err) throw err;
  const line = (msg ?? "bad arguments").replace(/\s*\n\s*/g, " ").trim();
  throw new UserError(badChoice(line, positionals) ?? line);
}

/**
 * yargs' `Invalid values: Argument: fill, Given: "x", Choices: "a", "b"` as `--fill "x" is not one of: a, b`, each
 * flag's where several are bad (joined by "; "); null for any other message.
 */
function badChoice(line: string, positionals: readonly string[]): string | null {
  if (!line.startsWith("Invalid values: Argument: ")) return null;
  const parts = line
    .slice("Invalid values: ".length)
    .split(/\s*Argument: /)
    .filter(Boolean)
    .map((part) => /^([\w-]+), Given: (.*), Choices: (.*)$/.exec(part));
  if (parts.some((m) => m === null)) return null;
  return parts
    .map((m) => {
      const [, name, given, choices] = m as unknown as [string, string, string, string];
      const flag = positionals.includes(name) ? name : `--${kebab(name)}`;
      return `${flag} ${given} is not one of: ${choices.replace(/"/g, "")}`;
    })
    .join("; ");
}

/** yargs' option lists as .check() receives them (the names as declared). */
interface OptionLists {
  boolean: string[];
  string: string[];
  number: string[];
}

/**
 * A number flag's text as typed: present (yargs would take the default where the flag ends the line or the next
 * flag follows it) and a number (yargs would pass on NaN, and the range check then show "NaN", not the text).
 */
function numberGiven(name: string, raw: string | undefined, attached: boolean): void {
  if (raw === undefined || (!attached && raw.startsWith("--"))) throw new UserError(`--${name} needs a value`);
  if (raw !== "" && !DECIMAL.test(raw)) throw new UserError(`--${name} must be a number (got ${JSON.stringify(raw)})`);
}

/** A number as typed in decimal: 8, -1, 1.5, 1e3 (not " ", 0x10 or Infinity, which Number() would also take). */
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** --maxNewTokens as yargs also takes it: the declared kebab-case name. */
const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/**
 * yargs .check(): a boolean flag is given bare, as --no-flag, or as =true / =false (yargs would read
 * `--json=maybe` or `--json=1` as false); a string flag has a non-empty value (an empty shell variable
 * must not stand for "not given", nor `--no-model` for false); a number flag has a value that is a number.
 */
export function flagValues(args: readonly string[]) {
  return (argv: Record<string, unknown>, options: OptionLists): true => {
    const booleans = new Set(options.boolean);
    const valued = new Set([...options.string, ...options.number]);
    const numbers = new Set(options.number);
    for (const [i, arg] of args.entries()) {
      if (arg === "--") break;
      const m = /^--(?:no-)?([^=]+)(?:=(.*))?$/s.exec(arg);
      if (!m) continue;
      const [, typed, value] = m as unknown as [string, string, string | undefined];
      const name = kebab(typed);
      if (booleans.has(name) && value !== undefined && value !== "true" && value !== "false") {
        throw new UserError(
          `--${name} is a switch: give it alone, as --no-${name}, or =true / =false (got ${JSON.stringify(value)})`,
        );
      }
      if (valued.has(name) && (value ?? args[i + 1]) === "") {
        throw new UserError(`--${name} is empty (an unset shell variable?); give it a value or leave it out`);
      }
      if (numbers.has(name) && arg.startsWith("--no-"))
        throw new UserError(`--no-${name}: --${name} takes a number, it is not a switch`);
      if (numbers.has(name)) numberGiven(name, value ?? args[i + 1], value !== undefined);
    }
    for (const name of options.string.filter((n) => !/[A-Z]/.test(n))) {
      const value = argv[name];
      if (value === "")
        throw new UserError(`--${name} is empty (an unset shell variable?); give it a value or leave it out`);
      if (typeof value === "boolean") throw new UserError(`--${name} needs a value`);
    }
    return true;
  };
}

/**
 * Every command's flag rules, as one line each: unknown flags, repeated flags (other than the `lists`
 * positionals), a switch given a value other than true/false, and an empty valued flag are errors.
 */
export function parseFlags<T>(
  flags: Argv<T>,
  lists: readonly string[] = [],
  args: readonly string[] = hideBin(process.argv),
) {
  return flags
    .strict()
    .check((argv) => noRepeatedFlags(argv, lists))
    .check(flagValues(args) as never)
    .help()
    .fail((msg, err) => failOnBadFlags(msg, err, lists))
    .parse();
}
