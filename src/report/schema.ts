// JSON Schema (draft 2020-12) of summary.json, i.e. of ProfileSummary (src/profile/types.ts), and its validator.
// Keep the two in step: the tests validate a synthetic ProfileSummary against this schema.
import Ajv2020, { type ErrorObject } from "ajv/dist/2020.js";

import { DTYPE_NAMES, MAX_BATCH, OP_FAMILIES } from "../ops.ts";
import { PLAN_KINDS } from "../plan.ts";
import { FILL_CHOICES, FILL_METHODS } from "../profile/fill.ts";
import { SCHEMA_VERSION } from "../profile/types.ts";
import { LAUNCH_MODE_NAMES } from "../run/launch-modes.ts";

const dtype = { enum: DTYPE_NAMES };
const number = { type: "number" } as const;
const nonNegative = { type: "number", minimum: 0 } as const;
const count = { type: "integer", minimum: 0 } as const;
const text = { type: "string" } as const;
const nullableNumber = { type: ["number", "null"] } as const;
const share = { type: "number", minimum: 0, maximum: 1 } as const;

function object(properties: Record<string, unknown>, optional: string[] = []) {
  return {
    type: "object",
    properties,
    required: Object.keys(properties).filter((k) => !optional.includes(k)),
    additionalProperties: false,
  };
}

const studyMode = { enum: [...LAUNCH_MODE_NAMES, "uncached"] };
const opFamily = { enum: OP_FAMILIES };

const stats = object({
  n: { type: "integer", minimum: 1 },
  median: number,
  mean: number,
  p10: number,
  p90: number,
  min: number,
  max: number,
  stddev: nonNegative,
  spread: number,
});

const opAggregate = object({
  key: text,
  calls: count,
  total_ms: nonNegative,
  mean_ms: number,
  median_ms: number,
  min_ms: number,
  max_ms: number,
  stddev_ms: nonNegative,
  share,
});

const timeSplit = object({
  step_ms: nonNegative,
  host_issue_ms: nonNegative,
  launch_api_ms: nonNegative,
  busy_ms: nonNegative,
  idle_ms: number,
  verdict: text,
});

const work = object({ flops: nonNegative, bytes: nonNegative, weight_bytes: nonNegative, kv_bytes: nonNegative });

const regime = { enum: ["launch-bound", "memory-bound", "compute-bound"] };

const studyPoint = object(
  {
    mode: studyMode,
    context: count,
    device_ms: { $ref: "#/$defs/stats" },
    host_ms: { $ref: "#/$defs/stats" },
    breakdown: object({
      families: { type: "array", items: { $ref: "#/$defs/opAggregate" } },
      layers: { type: "array", items: { $ref: "#/$defs/opAggregate" } },
      op_sum_ms: nonNegative,
      overlapping_ops: nonNegative,
    }),
    split: { $ref: "#/$defs/timeSplit" },
    work: { $ref: "#/$defs/work" },
    achieved: object({
      flops_per_s: nonNegative,
      bytes_per_s: nonNegative,
      flops_share: nonNegative,
      bytes_share: nonNegative,
      regime: text,
    }),
    read_bytes_per_s: nullableNumber,
    over_floor: nonNegative,
  },
  ["breakdown", "split"],
);

const kernelRegime = object({
  family: opFamily,
  mode: studyMode,
  context: count,
  median_us: nonNegative,
  flops_per_s: nonNegative,
  bytes_per_s: nonNegative,
  regime,
});

const seedRow = object({
  context: count,
  fill: { enum: [...FILL_METHODS] },
  uncached_ms: nullableNumber,
  uncached_model_ms: nullableNumber,
  cached: {
    type: "object",
    propertyNames: { enum: LAUNCH_MODE_NAMES },
    additionalProperties: object({ ms: nonNegative, speedup: nullableNumber }),
  },
  flop_reduction: nonNegative,
  kv_byte_share: share,
  read_bytes_per_s: nullableNumber,
  floor_ms: nonNegative,
  over_floor: nullableNumber,
});

const endToEnd = object({
  mode: studyMode,
  prompt_tokens: count,
  new_tokens: count,
  total_ms: nonNegative,
  per_token_ms: nonNegative,
  ttft_ms: nonNegative,
  tpot_ms: nullableNumber,
});

const promptCache = object({
  suffix_tokens: count,
  new_tokens: count,
  repeats: count,
  how: text,
  points: {
    type: "array",
    minItems: 1,
    items: object({
      prefix_tokens: count,
      bytes_kept: nonNegative,
      file_bytes: nonNegative,
      cold_ttft_ms: stats,
      warm_memory_ttft_ms: stats,
      warm_file_ttft_ms: stats,
      streams_identical: { type: "boolean" },
    }),
  },
});

const placed = object({ weights: nonNegative, cache: nonNegative, activations: nonNegative });
const memory = object({
  fit: object({
    free_bytes: nonNegative,
    free_source: text,
    need: placed,
    largest_context: count,
    largest_context_by_batch: { type: "array", items: object({ batch: count, context: count }) },
  }),
  resident_source: text,
  by_context: {
    type: "array",
    items: object({
      context: count,
      kv_positions: count,
      kv_bytes_formula: nonNegative,
      kv_bytes_resident: nonNegative,
      regions: {
        type: "array",
        items: object({ name: text, allocated_bytes: nonNegative, resident_bytes: nonNegative }),
      },
    }),
  },
  weight_bytes: nonNegative,
  kv_bytes_per_token_formula: nonNegative,
  kv_bytes_per_token_measured: nonNegative,
  kv_cache_tokens: count,
  kv_cache_bytes_formula: nonNegative,
  kv_cache_bytes_measured: nonNegative,
  workspace_bytes: nonNegative,
  how_measured: text,
  crossover: { type: "array", items: object({ batch: count, context: count }) },
});

const gpt2Config = object(
  {
    name: text,
    n_layer: { type: "integer", minimum: 1 },
    n_head: { type: "integer", minimum: 1 },
    n_kv_head: { type: "integer", minimum: 1 },
    n_embd: { type: "integer", minimum: 1 },
    n_positions: { type: "integer", minimum: 1 },
    vocab_size: { type: "integer", minimum: 1 },
    layer_norm_epsilon: { type: "number", exclusiveMinimum: 0 },
  },
  ["n_kv_head"],
);

const llama3Scaling = object({
  factor: { type: "number", exclusiveMinimum: 0 },
  low_freq_factor: { type: "number", exclusiveMinimum: 0 },
  high_freq_factor: { type: "number", exclusiveMinimum: 0 },
  original_max_position_embeddings: { type: "number", exclusiveMinimum: 0 },
});

const llamaConfig = object(
  {
    arch: { enum: ["llama", "mistral", "qwen2", "qwen3"] },
    name: text,
    n_layer: { type: "integer", minimum: 1 },
    n_head: { type: "integer", minimum: 1 },
    n_kv_head: { type: "integer", minimum: 1 },
    head_dim: { type: "integer", minimum: 1 },
    n_embd: { type: "integer", minimum: 1 },
    intermediate_size: { type: "integer", minimum: 1 },
    n_positions: { type: "integer", minimum: 1 },
    vocab_size: { type: "integer", minimum: 1 },
    rms_norm_eps: { type: "number", exclusiveMinimum: 0 },
    rope_theta: { type: "number", exclusiveMinimum: 0 },
    rope_scaling: { oneOf: [{ type: "null" }, llama3Scaling] },
    tie_word_embeddings: { type: "boolean" },
    qkv_bias: { type: "boolean" },
    qk_norm: { type: "boolean" },
    sliding_window: { type: "integer", minimum: 1 },
  },
  ["sliding_window"],
);

const peerDispatchSplit = object({
  context: count,
  unit: text,
  ops_per_step: count,
  torch_calls: count,
  step_ms: nonNegative,
  host_issue_ms: number,
  launch_api_ms: nonNegative,
  busy_ms: nonNegative,
  idle_ms: number,
});

const peerResult = object({
  id: text,
  peer: text,
  variant: text,
  short: text,
  label: text,
  version: text,
  device: text,
  settings: { type: "object", additionalProperties: { type: ["string", "number", "boolean"] } },
  points: {
    type: "array",
    items: object({
      context: count,
      ms: { $ref: "#/$defs/stats" },
      best_mode: { type: ["string", "null"] },
      best_mode_ms: nullableNumber,
      ratio_to_best_mode: nullableNumber,
      floor_ms: nullableNumber,
      ratio_to_floor: nullableNumber,
    }),
  },
  agreement: {
    oneOf: [
      { type: "null" },
      object({
        matched: count,
        of: count,
        agrees: { type: "boolean" },
        tokens: { type: "array", items: count },
        parted: {
          oneOf: [
            { type: "null" },
            object({ rank: { type: "integer", minimum: 1 }, margin: { type: "number", minimum: 0 } }),
          ],
        },
      }),
    ],
  },
});

const peers = object({
  method: text,
  prompt_ids: { type: "array", items: count },
  reference_tokens: { type: "array", items: count },
  results: { type: "array", items: peerResult },
  torch_dispatch: { type: "array", items: peerDispatchSplit },
  skipped: { type: "array", items: object({ name: text, reason: text }) },
});

const interventionConfig = {
  dtype,
  kv_dtype: dtype,
  batch: { type: "integer", minimum: 1, maximum: MAX_BATCH },
  kv_heads: { type: "integer", minimum: 1 },
};

const kvHeads = object({
  variants: { type: "array", items: { type: "integer", minimum: 1 }, minItems: 2 },
  timed_together: { type: "boolean" },
  savings: {
    type: "array",
    items: object({
      ...interventionConfig,
      context: count,
      reference_kv_heads: { type: "integer", minimum: 1 },
      step_ms: nonNegative,
      reference_ms: nonNegative,
      saved: number,
      formula_saved: number,
      saved_over_formula: nullableNumber,
    }),
  },
  crossovers: {
    type: "array",
    items: object({
      ...interventionConfig,
      formula_context: nonNegative,
      within_run: { type: "boolean" },
      measured_context: { type: ["number", "null"], minimum: 0 },
    }),
  },
  crossover_how: text,
  verdict: text,
});

const interventions = object({
  mode: text,
  method: text,
  configs: { type: "array", items: object(interventionConfig) },
  points: {
    type: "array",
    items: object({
      ...interventionConfig,
      context: count,
      fill: { enum: [...FILL_METHODS] },
      step_ms: { $ref: "#/$defs/stats" },
      token_ms: nonNegative,
      work: { $ref: "#/$defs/work" },
      bytes_per_token: nonNegative,
      intensity: nonNegative,
      achieved: object({
        flops_per_s: nonNegative,
        bytes_per_s: nonNegative,
        flops_share: nonNegative,
        bytes_share: nonNegative,
        regime: text,
      }),
      read_bytes_per_s: nullableNumber,
      over_floor: nonNegative,
    }),
  },
  balance_flop_per_byte: nonNegative,
  attribution: object({
    context: count,
    launch: {
      oneOf: [{ type: "null" }, object({ mode: text, eager_ms: nonNegative, mode_ms: nonNegative, change: number })],
    },
    bytes: {
      oneOf: [{ type: "null" }, object({ from: dtype, to: dtype, bytes_ratio: nonNegative, time_ratio: nonNegative })],
    },
    batch: {
      oneOf: [
        { type: "null" },
        object({
          batch: count,
          step_ratio: nonNegative,
          token_ratio: nonNegative,
          compute_bound_from: { type: ["integer", "null"] },
        }),
      ],
    },
    verdict: text,
  }),
  kv_heads: { oneOf: [{ type: "null" }, kvHeads] },
});

export const PROFILE_SUMMARY_SCHEMA = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: `urn:decode-floor:summary:${SCHEMA_VERSION}`,
  title: "decode-floor profile summary (summary.json)",
  ...object(
    {
      schema_version: { const: SCHEMA_VERSION },
      tool: object({ name: text, version: text }),
      command: text,
      date: { type: "string", format: "date-time" },
      machine: object({ hostname: text, os: text, cpu: text, cpus: count, memory_bytes: nonNegative, bun: text }),
      device: object({
        backend: { enum: ["cpu", "cuda"] },
        name: text,
        detail: { type: "object", additionalProperties: { type: ["string", "number"] } },
        peaks: object(
          {
            bytes_per_s: nonNegative,
            flops_per_s: nonNegative,
            how_measured: text,
            read_probe: object({
              bytes_per_s: nonNegative,
              passes: object({ count: count, min: nonNegative, median: nonNegative, max: nonNegative }),
              buffer_bytes: nonNegative,
              knee_bytes: nonNegative,
              sweep: { type: "array", items: object({ bytes: nonNegative, bytes_per_s: nonNegative }) },
              capped: { type: "boolean" },
              tracker_bytes: nullableNumber,
              how_measured: text,
            }),
          },
          ["read_probe"],
        ),
        launch: object({
          host_us: nonNegative,
          device_us: nullableNumber,
          graph_node_us: nullableNumber,
          pdl_node_us: nullableNumber,
          grid_barrier_us: nullableNumber,
          grid_barrier_skewed_us: nullableNumber,
          grid_barrier_sc_us: nullableNumber,
          grid_barrier_sc_skewed_us: nullableNumber,
          how_measured: text,
        }),
      }),
      model: object({
        config: { oneOf: [gpt2Config, llamaConfig] },
        source: text,
        parameters: count,
        dtype,
        weight_bytes: nonNegative,
      }),
      settings: object({
        modes: { type: "array", items: studyMode },
        plan: { enum: [...PLAN_KINDS] },
        contexts: { type: "array", items: count },
        repeats: count,
        warmup: count,
        kernels: { type: "boolean" },
        dtype,
        kv_dtype: dtype,
        fill: { enum: [...FILL_CHOICES] },
        prefill_flops_per_s: nonNegative,
      }),
      points: { type: "array", items: { $ref: "#/$defs/studyPoint" } },
      regimes: { type: "array", items: kernelRegime },
      seed_table: { type: "array", items: seedRow },
      end_to_end: { type: "array", items: endToEnd },
      memory,
      tracing: object({
        available: { type: "boolean" },
        overhead_pct: nullableNumber,
        dropped_records: count,
        note: text,
      }),
      verdicts: { type: "array", items: text },
      peers,
      interventions,
      predictions: object({
        gpu: text,
        how: text,
        points: {
          type: "array",
          items: object({
            mode: text,
            context: count,
            ...interventionConfig,
            measured_ms: nonNegative,
            predicted_ms: nonNegative,
            optimistic_ms: nonNegative,
            pessimistic_ms: nonNegative,
            measured_over_predicted: nonNegative,
          }),
        },
        kernels: {
          type: "array",
          items: object({
            mode: text,
            context: count,
            family: text,
            calls: count,
            measured_us: nonNegative,
            predicted_us: nonNegative,
            optimistic_us: nonNegative,
            pessimistic_us: nonNegative,
            measured_over_predicted: nullableNumber,
          }),
        },
        kernels_how: text,
        launch_parameters: {
          type: "array",
          items: object({
            parameter: text,
            model_us: nonNegative,
            low_us: nonNegative,
            high_us: nonNegative,
            measured_us: nullableNumber,
          }),
        },
      }),
      prompt_cache: promptCache,
    },
    ["peers", "interventions", "predictions", "prompt_cache"],
  ),
  $defs: { stats, opAggregate, timeSplit, work, studyPoint },
};

/** ISO 8601 date-time (what `new Date().toISOString()` writes, offsets allowed). */
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

const ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true });
ajv.addFormat("date-time", DATE_TIME);
const validate = ajv.compile(PROFILE_SUMMARY_SCHEMA);

/** Problems that make `obj` not a ProfileSummary, as "<JSON pointer>: <message>" (empty when valid). */
export function validateSummary(obj: unknown): string[] {
  return validate(obj) ? [] : schemaProblems(validate.errors);
}

/** Ajv's errors as "<JSON pointer>: <message>". */
export function schemaProblems(errors: ErrorObject[] | null | undefined): string[] {
  return (errors ?? []).map((e) => {
    const extra = e.keyword === "additionalProperties" ? ` (${String(e.params.additionalProperty)})` : "";
    return `${e.instancePath || "/"}: ${e.message ?? e.keyword}${extra}`;
  });
}
