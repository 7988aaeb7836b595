// bun run generate — greedy generation with or without the KV cache, on any backend and launch mode.
import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { BACKEND_CHOICES, openBackend, type BackendChoice } from "../backends/select.ts";
import { runCli, UserError } from "../errors.ts";
import { parsePromptIds, type TextCodec, textCodec } from "../model/tokenizer.ts";
import { DTYPE_NAMES, MAX_BATCH, type DtypeName } from "../ops.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, type PlanKind, type StepForm } from "../plan.ts";
import { checkPositions, generateBatch } from "../run/generate.ts";
import {
  LAUNCH_MODE_NAMES,
  launchMode,
  modeForm,
  replayMode,
  unavailableMode,
  type LaunchMode,
  type LaunchModeName,
} from "../run/launch-modes.ts";
import {
  checkPrefixIdentity,
  checkPrefixModel,
  encodePrefix,
  keepPrefix,
  readPrefixFile,
  prefixIdentityOf,
  restoredBytes,
  reusedRows,
  type KeptPrefix,
} from "../run/prefix.ts";
import { checkSessionFits } from "../run/memory-fit.ts";
import { Session } from "../run/session.ts";
import { summarize } from "../stats.ts";
import {
  checkHostMemory,
  DEFAULT_PRESET,
  DEFAULT_SEED,
  intFlag,
  loadAnyWeights,
  MODEL_FLAG_HELP,
  parseFlags,
  PRESET_CHOICES,
  PRESET_FLAG_HELP,
} from "./common.ts";
import { checkDistinctFiles, checkWritableFile, writeFileAtomic, writeStdout } from "./outputs.ts";
import { counted } from "../words.ts";

/** replay = the plan recorded natively: a CUDA graph where the backend has graphs, one native call per step elsewhere */
const MODES = [...LAUNCH_MODE_NAMES, "replay"] as const;
const DEFAULT_PROMPT = "Hello, I'm a language model,";
/** The untimed warm-up request: the prompts' first tokens and a few new ones (generate --cold skips it). */
const WARMUP_PROMPT_TOKENS = 16;
const WARMUP_NEW_TOKENS = 2;
/** "1 token's", "10 tokens'": whose keys and values */
const tokensOf = (n: number) => (n === 1 ? "1 token's" : `${n} tokens'`);

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run generate")
      .usage("$0 [options]: greedy generation with a KV cache (GPT-2, Llama, Mistral, Qwen2, Qwen3)")
      .option("model", {
        type: "string",
        describe: MODEL_FLAG_HELP,
      })
      .option("preset", {
        choices: PRESET_CHOICES,
        describe: PRESET_FLAG_HELP,
      })
      .conflicts("model", "preset")
      .option("prompt", {
        type: "string",
        describe: `prompt text (the checkpoint's tokenizer.json, else GPT-2's BPE, or bytes for seeded weights), once per sequence or once for all; default ${JSON.stringify(DEFAULT_PROMPT)}`,
      })
      .option("prompt-ids", {
        type: "string",
        describe: "prompt as token ids, e.g. 464,3290,318; once per sequence or once for all",
      })
      .option("max-new-tokens", { type: "number", default: 20, describe: "tokens to generate (per sequence)" })
      .option("batch", {
        type: "number",
        describe: "sequences decoded together in one step (default: one per prompt given); one prompt is repeated",
      })
      .option("dtype", {
        choices: DTYPE_NAMES,
        describe:
          "storage type of the weight matrices and embeddings (default: the checkpoint's; f32 for seeded weights); sums stay fp32",
      })
      .option("kv-dtype", { choices: DTYPE_NAMES, describe: "storage type of the KV cache (default: --dtype's)" })
      .option("backend", {
        choices: BACKEND_CHOICES,
        default: "auto" as BackendChoice,
        describe:
          "cpu, cuda, auto (cuda if available, else cpu), emu (the CUDA kernels' sources run on the CPU: slow, for verification)",
      })
      .option("cache", {
        choices: ["on", "off"] as const,
        default: "on" as const,
        describe: "KV cache, or recompute the whole sequence every token",
      })
      .option("mode", {
        choices: MODES,
        default: "eager" as const,
        describe: "launch mode of cached decode steps (replay = graph on CUDA, eager-native on the CPU)",
      })
      .option("plan", {
        choices: PLAN_KINDS,
        describe:
          "ops of cached decode steps: fused (the default: 5 launches per layer) or unfused (one launch per op: 11 per layer for GPT-2, 12 for the Llama family)",
      })
      .option("seed", {
        type: "number",
        describe: `seed of the random weights when no --model is given (default ${DEFAULT_SEED})`,
      })
      .conflicts("model", "seed")
      .option("threads", {
        type: "number",
        describe: "CPU backend threads, 1 up to the CPUs this process may run on (default: all of them)",
      })
      .option("json", { type: "boolean", default: false, describe: "print one JSON object on stdout" })
      .option("dump-logits", {
        type: "string",
        describe: "write float32 LE logits (len(prompt)+generated, vocab) from one uncached pass",
      })
      .option("save-prefix", {
        type: "string",
        describe:
          "after the run, write the prompt's keys and values to FILE (with the config, storage types and a hash of the weights) for --prefix",
      })
      .option("prefix", {
        type: "string",
        describe:
          "a file from --save-prefix whose tokens every prompt begins with: its keys and values are restored and only the rest of the prompt is prefilled",
      })
      .option("force", {
        type: "boolean",
        default: false,
        describe: "let --save-prefix and --dump-logits replace a file that exists",
      })
      .option("cold", {
        type: "boolean",
        default: false,
        describe: `time the process's first request: without the untimed warm-up request (the prompts' first ${WARMUP_PROMPT_TOKENS} tokens, ${WARMUP_NEW_TOKENS} new) that otherwise starts the threads, touches the buffers and compiles the code first`,
      })
      .conflicts("prompt", "prompt-ids"),
    ["prompt", "prompt-ids"],
  );

  const say = (line: string) => process.stderr.write(`${line}\n`);
  const maxNew = intFlag("max-new-tokens", argv["max-new-tokens"], 1);
  if (argv.force && argv["dump-logits"] === undefined && argv["save-prefix"] === undefined)
    throw new UserError("--force lets --save-prefix or --dump-logits replace a file: give one of them too");
  const output = (flag: "dump-logits" | "save-prefix") =>
    argv[flag] === undefined ? undefined : checkWritableFile(flag, argv[flag], { replace: argv.force });
  const dumpLogits = output("dump-logits");
  const savePrefix = output("save-prefix");
  checkDistinctFiles([
    ["prefix", argv.prefix],
    ["save-prefix", savePrefix],
    ["dump-logits", dumpLogits],
  ]);
  if ((savePrefix !== undefined || argv.prefix !== undefined) && argv.cache === "off")
    throw new UserError(
      `--${argv.prefix !== undefined ? "prefix" : "save-prefix"} keeps the KV cache's rows: it needs --cache on`,
    );
  const threads = argv.threads === undefined ? undefined : intFlag("threads", argv.threads, 1, 1024);
  // the model's header and the prompt are checked before the backend opens, and the model's line is said
  // after them: a bad input is its one line
  const modelLines: string[] = [];
  const weights = loadAnyWeights(
    argv.model,
    argv.preset ?? DEFAULT_PRESET,
    intFlag("seed", argv.seed ?? DEFAULT_SEED, 0),
    (line) => modelLines.push(line),
  );
  const cfg = weights.config;
  const plan: PlanKind = argv.plan ?? DEFAULT_STEP_FORM.plan;
  const { codec, codecNote } = codecFor(argv.model, cfg.vocab_size, argv["prompt-ids"] !== undefined);
  const encode = (text: string) => {
    if (!codec)
      throw new UserError(
        `${cfg.name} has no tokenizer.json and its ${cfg.vocab_size} tokens are not GPT-2's, so a text prompt can't be tokenized; give token ids with --prompt-ids (e.g. --prompt-ids 1,2,3)`,
      );
    return codec.encode(text);
  };
  const decode = (ids: readonly number[]) => (codec ? codec.decode(ids) : ids.map((id) => `<${id}>`).join(""));
  const given =
    argv["prompt-ids"] !== undefined
      ? [argv["prompt-ids"]].flat().map((ids) => parsePromptIds(ids, cfg.vocab_size))
      : [argv.prompt ?? DEFAULT_PROMPT].flat().map(encode);
  const batch = argv.batch === undefined ? given.length : intFlag("batch", argv.batch, 1, MAX_BATCH);
  if (given.length !== 1 && given.length !== batch) {
    throw new UserError(`--batch ${batch} takes one prompt (repeated) or ${batch} prompts, not ${given.length}`);
  }
  const prompts = given.length === batch ? given : Array.from({ length: batch }, () => given[0]!);
  checkPositions(prompts, maxNew, cfg);
  if (savePrefix !== undefined && batch > 1)
    throw new UserError("--save-prefix keeps one prompt's keys and values: use it with one prompt and --batch 1");
  const dtype: DtypeName = argv.dtype ?? weights.storedAs;
  const form: StepForm = { plan, batch, weights: dtype, kv: argv["kv-dtype"] ?? dtype };
  const prefixRead = argv.prefix === undefined ? undefined : timedRead(argv.prefix);
  if (prefixRead) {
    // another model's prefix says so before its tokens are compared with the prompt's
    checkPrefixModel(prefixRead.kept, { config: cfg, weights_dtype: form.weights, kv_dtype: form.kv }, argv.prefix!);
    for (const [b, p] of prompts.entries()) reusedRows(p, prefixRead.kept, argv.prefix!, batch > 1 ? b : null);
  }
  if (dumpLogits && batch > 1)
    throw new UserError("--dump-logits writes one sequence's logits: use it with one prompt and --batch 1");
  const backend = await openBackend(argv.backend, { threads, note: (line) => modelLines.push(line) });
  if (backend.kind !== "cuda") checkHostMemory(cfg, dtype); // the CPU's and the emulator's weights are in host memory
  const maxContext = Math.max(...prompts.map((p) => p.length)) + maxNew;
  checkSessionFits(backend, cfg, form, maxContext);
  const mode = argv.mode === "replay" ? replayMode(backend) : launchMode(argv.mode as LaunchModeName);
  const judged = modeForm(form, cfg);
  if (!mode.available(backend, judged)) throw unavailableMode(mode.name, backend, judged);
  const session = new Session(backend, weights, { form, maxContext });
  // the weights' hash and the prefix's checks come before the warm-up and the timed run, as a server's would at start-up
  const identity = prefixRead || savePrefix ? prefixIdentityOf(session) : undefined;
  if (prefixRead) checkPrefixIdentity(prefixRead.kept, identity!, argv.prefix!);
  // the model's lines and the backend's notes once every input is known good: a bad one is one line
  modelLines.forEach(say);
  if (codec && argv["prompt-ids"] === undefined) say(`tokenizer: ${codec.source}`);
  if (codecNote) say(codecNote);
  const cache = argv.cache === "on";
  if (!cache && mode.name !== "eager")
    say(`note: --cache off recomputes eagerly; --mode ${argv.mode} applies to cached steps only`);
  if (!cache && argv.plan === "fused")
    say("note: --cache off recomputes with one launch per op; --plan fused applies to cached steps only");
  if (!argv.cold) warmUp(session, prompts, Math.min(WARMUP_NEW_TOKENS, maxNew), cache, mode);
  const prefix = prefixRead && { kept: prefixRead.kept, source: argv.prefix! };
  const result = generateBatch(session, { prompts, maxNewTokens: maxNew, cache, mode, ...(prefix ? { prefix } : {}) });
  const saved = savePrefix && keepPrefix(backend, session.sequenceCache(0), identity!, prompts[0]!);
  if (savePrefix && saved) writeFileAtomic(savePrefix, encodePrefix(saved));

  if (dumpLogits) {
    const logits = session.logitsAtEveryPosition([...result.promptIds[0]!, ...result.generatedIds[0]!]);
    writeFileAtomic(dumpLogits, new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
  }
  // the first decode step also captures the graph (or warms caches): reported on its own, not in the median
  const [firstStepMs, ...steadyMs] = result.tokenMs.filter((_, i) => result.tokenKinds[i] !== "prefill");
  // one sequence: flat lists, as before batches; several: a list per sequence
  const perSequence = <T>(values: T[]) => (batch === 1 ? values[0]! : values);
  const texts = result.generatedIds.map(decode);
  const summary = {
    prompt_ids: perSequence(result.promptIds),
    generated_ids: perSequence(result.generatedIds),
    text: perSequence(texts),
    batch,
    dtype: form.weights,
    kv_dtype: form.kv,
    backend: backend.kind,
    device: backend.deviceName,
    cache: argv.cache,
    mode: cache ? mode.name : "eager",
    plan: cache ? plan : "unfused",
    model: { name: cfg.name, source: weights.source },
    token_ms: result.tokenMs,
    token_kinds: result.tokenKinds,
    warmed_up: !argv.cold,
    first_step_ms: firstStepMs ?? null,
    median_step_ms: steadyMs.length ? summarize(steadyMs).median : null,
    ...firstTokenSplit(result.tokenMs),
    ...(prefixRead && {
      prefix: {
        file: argv.prefix,
        tokens: prefixRead.kept.tokens.length,
        reused_rows: perSequence(result.reusedRows),
        bytes: prefixRead.kept.rows.length,
        restored_bytes: perSequence(result.reusedRows.map((rows) => restoredBytes(prefixRead.kept, rows))),
        read_ms: prefixRead.ms,
      },
    }),
    ...(saved && { saved_prefix: { file: savePrefix, tokens: saved.tokens.length, bytes: saved.rows.length } }),
  };
  if (argv.json) {
    writeStdout(`${JSON.stringify(summary)}\n`);
  } else {
    writeStdout(result.promptIds.map((ids, b) => `${decode(ids)}${texts[b]}\n`).join(""));
    const step = batch === 1 ? "token" : `step of ${batch} tokens`;
    const perToken =
      summary.median_step_ms === null
        ? ""
        : `, median ${summary.median_step_ms.toFixed(3)} ms per ${cache ? "cached" : "recomputed"} ${step} after the first`;
    const storage = `weights ${form.weights}, cache ${form.kv}`;
    say(
      `${backend.kind} (${backend.deviceName}), cache ${argv.cache}, mode ${summary.mode}, plan ${summary.plan}, ${storage}: ${counted(maxNew, "token")}${batch > 1 ? ` × ${batch} sequences` : ""}${perToken}`,
    );
    if (summary.ttft_ms !== null) say(firstTokenLine(summary.ttft_ms, summary.tpot_ms, summary.warmed_up));
    if (prefixRead) {
      const restored = result.reusedRows.map((rows, b) => {
        const whose = batch > 1 ? `sequence ${b + 1}'s` : "the prompt's";
        return `${rows} of ${whose} ${tokensOf(prompts[b]!.length)} keys and values restored (${restoredBytesText(prefixRead.kept, rows)})`;
      });
      say(
        `prefix ${argv.prefix}: ${restored.join("; ")}; read and checked once in ${prefixRead.ms.toFixed(1)} ms, outside the time to first token` +
          (summary.ttft_ms === null
            ? ""
            : ` (${(summary.ttft_ms + prefixRead.ms).toFixed(3)} ms with it, as profile's warm start from a file counts the read)`),
      );
    }
    if (saved)
      say(
        `saved the prompt's ${tokensOf(saved.tokens.length)} keys and values to ${savePrefix} (${saved.rows.length} bytes)`,
      );
  }
  session.close();
  backend.close();
});

/**
 * Time to first token (the prompt's step, synchronised) and time per output token after it (the mean of the
 * rest: the field's TTFT / TPOT split); null where there is no such token.
 */
function firstTokenSplit(tokenMs: number[]): { ttft_ms: number | null; tpot_ms: number | null } {
  const [first, ...rest] = tokenMs;
  return {
    ttft_ms: first ?? null,
    tpot_ms: rest.length ? rest.reduce((a, b) => a + b, 0) / rest.length : null,
  };
}

function firstTokenLine(ttft: number, tpot: number | null, warmedUp: boolean): string {
  const after = tpot === null ? "" : `, ${tpot.toFixed(3)} ms per output token after it (mean)`;
  const which = warmedUp ? "after one untimed warm-up request" : "the process's first request (--cold)";
  return `time to first token ${ttft.toFixed(3)} ms${after}; ${which}`;
}

/** The bytes a request restored, and the file's where it left rows unused (a prompt equal to the prefix). */
function restoredBytesText(kept: KeptPrefix, rows: number): string {
  const bytes = restoredBytes(kept, rows);
  return bytes === kept.rows.length
    ? `${bytes} bytes`
    : `${bytes} of the ${kept.rows.length} bytes of rows the file keeps`;
}

/**
 * One untimed request before the timed one, as a server has served others before: the threads started, the buffers'
 * pages touched, the plans built and the code compiled, so that the times are a request's, not the process's start.
 * It uses the paths the timed request does (the many-rows prefill past 8 tokens, the cached step in its launch mode),
 * no prefix; the timed request overwrites every cache row it reads.
 */
function warmUp(
  session: Parameters<typeof generateBatch>[0],
  prompts: number[][],
  newTokens: number,
  cache: boolean,
  mode: LaunchMode,
): void {
  const short = prompts.map((p) => p.slice(0, WARMUP_PROMPT_TOKENS));
  generateBatch(session, { prompts: short, maxNewTokens: newTokens, cache, mode });
}

/** A prefix file read whole, with the time that took (a warm request from a file pays it; one from memory does not). */
function timedRead(path: string): { kept: KeptPrefix; ms: number } {
  const t0 = Bun.nanoseconds();
  const kept = readPrefixFile(path);
  return { kept, ms: (Bun.nanoseconds() - t0) / 1e6 };
}

/**
 * The model's text codec; a tokenizer file that cannot be read is the run's one error line unless the prompt came as
 * ids (--prompt-ids always works), where it is a note and the text is shown as ids.
 */
function codecFor(
  modelDir: string | undefined,
  vocab: number,
  promptIds: boolean,
): { codec: TextCodec | null; codecNote?: string } {
  try {
    return { codec: textCodec(modelDir, vocab) };
  } catch (e) {
    if (!promptIds || !(e instanceof UserError)) throw e;
    return { codec: null, codecNote: `note: ${e.message}; the prompt is ids, so the text is shown as ids` };
  }
}
