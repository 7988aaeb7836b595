// bun run kv — the KV-cache memory of a decoder (a preset or a Hugging Face config.json): per token, for a
// context and a batch, against the weights, and where the cache outgrows them; GQA / MQA against full MHA.
import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { runCli } from "../errors.ts";
import { ALL_PRESETS } from "../model/architectures.ts";
import { kvReport, readDecoderConfig, shapeOf, type KvReport } from "../model/kv.ts";
import { DTYPE_NAMES, type DtypeName } from "../ops.ts";
import { formatBytes } from "../report/tables.ts";
import { DEFAULT_PRESET, intFlag, parseFlags, PRESET_CHOICES } from "./common.ts";

const count = (n: number) => n.toLocaleString("en-US");
const bytes = (n: number) => `${count(n)} B (${formatBytes(n)})`;

function render(r: KvReport): string {
  const gqa =
    r.kv_heads === r.heads
      ? `every one of the ${r.heads} heads keeps its own K and V (multi-head attention): no GQA saving`
      : `${r.kv_heads === 1 ? "MQA" : "GQA"}: ${r.kv_heads} K/V head${r.kv_heads === 1 ? "" : "s"} shared by ${r.heads} query heads, ` +
        `${r.gqa_saving}× smaller than multi-head attention's ${bytes(r.mha_kv_bytes_per_token)} per token`;
  const beyond = (context: number) =>
    context > r.max_context ? ` (beyond its ${count(r.max_context)}-token context)` : "";
  return [
    `KV cache of ${r.name} (${r.family}: ${r.layers} layers, ${r.heads} heads × ${r.head_dim}, ${r.kv_heads} K/V heads), ${r.dtype}:`,
    `  per token:  ${bytes(r.kv_bytes_per_token)} = 2 (K, V) × ${r.layers} layers × ${r.kv_heads} K/V heads × ${r.head_dim} × ${r.bytes_per_element} B`,
    `  context ${count(r.context)} × batch ${r.batch}:  ${bytes(r.kv_bytes)}, ${(r.kv_bytes / r.weight_bytes).toFixed(2)}× the weights${beyond(r.context)}`,
    `  weights:  ${count(r.parameters)} parameters × ${r.bytes_per_element} B = ${bytes(r.weight_bytes)} (${r.parameters_how})`,
    `  the cache outgrows the weights at context × batch = ${count(r.crossover_tokens)} tokens: ` +
      r.crossover
        .slice(0, 4)
        .map((c) => `batch ${c.batch} at context ${count(c.context)}${beyond(c.context)}`)
        .join(", "),
    `  ${gqa}`,
    ...r.notes.map((n) => `  note: ${n}`),
    "",
  ].join("\n");
}

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run kv")
      .usage("$0 [options]: KV-cache memory of a decoder, against its weights")
      .option("preset", {
        choices: PRESET_CHOICES,
        describe: `a model's exact shapes: GPT-2's sizes or the Llama family's presets (default ${DEFAULT_PRESET} without --config)`,
      })
      .option("config", {
        type: "string",
        describe: "a Hugging Face config.json (GPT-2, or Llama / Mistral / Qwen-style)",
      })
      .conflicts("preset", "config")
      .option("context", { type: "number", describe: "tokens per sequence (default: the model's maximum context)" })
      .option("batch", { type: "number", default: 1, describe: "sequences decoded together, each with its own cache" })
      .option("dtype", {
        choices: DTYPE_NAMES,
        default: "f32" as DtypeName,
        describe: "element type of the cache and the weights",
      })
      .option("json", { type: "boolean", default: false, describe: "print the figures as one JSON object" }),
  );
  const preset = argv.preset ?? DEFAULT_PRESET;
  const shape = argv.config ? readDecoderConfig(argv.config) : shapeOf(ALL_PRESETS[preset]!);
  const context = intFlag("context", argv.context ?? shape.max_context, 1);
  const report = kvReport(shape, context, intFlag("batch", argv.batch, 1), argv.dtype);
  process.stdout.write(argv.json ? `${JSON.stringify(report, null, 2)}\n` : render(report));
});
