// Puts a Llama-family model on a backend for `batch` sequences, as model-buffers.ts does GPT-2: the weights in one
// arena (matrices in the weight dtype, vectors fp32), the rotary table, a KV cache of n_kv_head × head_dim columns
// per layer and sequence, the activations for up to `maxRows` rows, each sequence's tokens and position.
import type { Backend } from "../backends/backend.ts";
import {
  kvWidth,
  llamaParameters,
  queryWidth,
  ropeTable,
  ropeTableBytes,
  type LlamaConfig,
  type LlamaWeights,
} from "../model/llama.ts";
import { DTYPE_BYTES, dtypeOf, STATE_INTS } from "../ops.ts";
import type { LlamaBuffers } from "../plan-llama.ts";
import { DEFAULT_STEP_FORM, dtypeCodes, type StepForm } from "../plan.ts";
import {
  Arena,
  cacheBytes,
  allocateBeside,
  parameterArena,
  placeWeights,
  rowsHeld,
  uploadParameters,
  type PlacedWeights,
  type PlacementBytes,
  type Resident,
} from "./model-buffers.ts";

const FLOAT = 4;
const INT32 = 4;

export type ResidentLlama = Resident<LlamaBuffers>;

/** Places a Llama-family model for these steps, its weights and rotary table read from `shared` where given. */
export function placeLlama(
  backend: Backend,
  weights: LlamaWeights,
  form: StepForm = DEFAULT_STEP_FORM,
  maxRows?: number,
  shared?: PlacedWeights,
): ResidentLlama {
  const cfg = weights.config;
  const rows = rowsHeld(cfg, form, maxRows);
  const { offsets, ropeAt, size } = weightLayout(cfg, form);
  const placed = placeWeights(
    backend,
    size,
    cfg.n_positions,
    (buffer) => {
      uploadParameters(backend, buffer, (visit) => weights.stream(visit), offsets, form.weights);
      backend.upload(buffer, ropeTable(cfg, cfg.n_positions), ropeAt);
    },
    shared,
  );
  const weightBuffer = placed.buffer;
  const w = (name: string) => weightBuffer.ptr + offsets.get(name)!;
  const linear = (p: string) => ({ weight: w(`${p}.weight`), bias: w(`${p}.bias`) });

  const { cache, acts, free } = allocateBeside(
    backend,
    placed,
    cfg,
    form,
    activationLayout(backend, cfg, rows, form.batch),
  );
  const buffers: LlamaBuffers = {
    config: cfg,
    batch: form.batch,
    dtypes: dtypeCodes(form),
    embed_tokens: w("embed_tokens.weight"),
    layers: Array.from({ length: cfg.n_layer }, (_, l) => ({
      input_layernorm: w(`layers.${l}.input_layernorm.weight`),
      qkv: linear(`layers.${l}.qkv`),
      q_norm: cfg.qk_norm ? w(`layers.${l}.q_norm.weight`) : 0,
      k_norm: cfg.qk_norm ? w(`layers.${l}.k_norm.weight`) : 0,
      o_proj: linear(`layers.${l}.o_proj`),
      post_attention_layernorm: w(`layers.${l}.post_attention_layernorm.weight`),
      gate_up: linear(`layers.${l}.gate_up`),
      down: linear(`layers.${l}.down`),
    })),
    norm: w("norm.weight"),
    lm_head: cfg.tie_word_embeddings ? w("embed_tokens.weight") : w("lm_head.weight"),
    rope: weightBuffer.ptr + ropeAt,
    kCache: cache.k,
    vCache: cache.v,
    ...acts.pointers,
    next: acts.pointers.seq,
    maxRows: rows,
  };
  return {
    buffers,
    form,
    weights: placed,
    allocations: { weights: weightBuffer, cache: cache.buffer, activations: acts.buffer },
    activationRegions: acts.regions,
    // the rotary table after them is sized by the run's context
    parameters: { ptr: weightBuffer.ptr, bytes: ropeAt },
    free,
  };
}

/** The weights' arena: each parameter's offset (matrices in the weight dtype), then the rotary table's. */
function weightLayout(cfg: LlamaConfig, form: Pick<StepForm, "weights">) {
  const { arena, offsets } = parameterArena(llamaParameters(cfg), form.weights);
  const ropeAt = arena.reserve(ropeTableBytes(cfg, cfg.n_positions));
  return { offsets, ropeAt, size: arena.size };
}

/** What placeLlama allocates for these steps (cfg.n_positions: the positions held), from the same layouts. */
export function llamaPlacementBytes(
  backend: Backend,
  cfg: LlamaConfig,
  form: StepForm,
  maxRows?: number,
): PlacementBytes {
  return {
    weights: weightLayout(cfg, form).size,
    cache: cacheBytes(cfg, form),
    activations: activationLayout(backend, cfg, rowsHeld(cfg, form, maxRows), form.batch).size,
  };
}

function activationLayout(backend: Backend, cfg: LlamaConfig, rows: number, batch: number) {
  const C = cfg.n_embd,
    Q = queryWidth(cfg),
    KV = kvWidth(cfg),
    I = cfg.intermediate_size;
  const arena = new Arena();
  const widest = Math.max(C, Q + 2 * KV, 2 * I);
  const at = {
    x: arena.reserve(rows * C * FLOAT),
    ln: arena.reserve(rows * C * FLOAT),
    qkv: arena.reserve(rows * (Q + 2 * KV) * FLOAT),
    att: arena.reserve(rows * Q * FLOAT),
    proj: arena.reserve(rows * C * FLOAT),
    fc: arena.reserve(rows * 2 * I * FLOAT),
    act: arena.reserve(rows * I * FLOAT),
    logits: arena.reserve(batch * cfg.vocab_size * FLOAT),
    scratch: arena.reserve(
      Math.max(
        FLOAT,
        backend.attentionScratchBytes(rows, Q, cfg.n_head, cfg.n_kv_head, cfg.n_positions),
        backend.attentionScratchBytes(1, Q, cfg.n_head, cfg.n_kv_head, cfg.n_positions),
      ),
    ),
    partials: arena.reserve(Math.max(FLOAT, backend.partialsBytes(rows, widest, widest, cfg.vocab_size))),
    seq: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    sink: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    state: arena.reserve(batch * STATE_INTS * INT32),
  };
  return { at, size: arena.size };
}

/** The buffers as sequence b alone sees them (model-buffers.ts sequenceView's twin). */
export function llamaSequenceView(m: LlamaBuffers, b: number): LlamaBuffers {
  if (!Number.isInteger(b) || b < 0 || b >= m.batch) throw new RangeError(`sequence ${b} outside 0..${m.batch - 1}`);
  const cfg = m.config;
  const cacheRowsBytes = cfg.n_positions * kvWidth(cfg) * DTYPE_BYTES[dtypeOf(m.dtypes.kv)];
  return {
    ...m,
    batch: 1,
    state: m.state + b * STATE_INTS * INT32,
    seq: m.seq + b * (cfg.n_positions + 1) * INT32,
    next: m.next + b * (cfg.n_positions + 1) * INT32,
    sink: m.sink + b * (cfg.n_positions + 1) * INT32,
    logits: m.logits + b * cfg.vocab_size * FLOAT,
    kCache: m.kCache.map((p) => p + b * cacheRowsBytes),
    vCache: m.vCache.map((p) => p + b * cacheRowsBytes),
  };
}
