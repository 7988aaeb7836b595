// Puts GPT-2 on a backend for `batch` sequences (the shared arena and placement: model-buffers.ts): its weights in
// one arena, a preallocated KV cache per layer and sequence in the cache dtype, the activations for up to `maxRows`
// rows, and each sequence's tokens and position that the kernels read from memory.
import type { Backend } from "../backends/backend.ts";
import { kvHeads, kvWidth, parameterSpecs, type GPT2Config, type GPT2Weights } from "../model/gpt2.ts";
import { DTYPE_BYTES, dtypeOf, STATE_INTS } from "../ops.ts";
import type { ModelBuffers } from "../plan-gpt2.ts";
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

export type ResidentModel = Resident<ModelBuffers>;

/**
 * Streams the weights onto the backend (each chunk converted to its storage type and uploaded as it comes: no
 * copy of the model is held on the host) unless `shared` holds them already, then allocates cache and activations
 * for steps of up to maxRows rows (default: n_positions, or the batch if larger).
 */
export function placeModel(
  backend: Backend,
  weights: GPT2Weights,
  form: StepForm = DEFAULT_STEP_FORM,
  maxRows?: number,
  shared?: PlacedWeights,
): ResidentModel {
  const cfg = weights.config;
  const rows = rowsHeld(cfg, form, maxRows);
  const { offsets, size } = weightLayout(cfg, form);
  const placed = placeWeights(
    backend,
    size,
    cfg.n_positions,
    (buffer) => uploadParameters(backend, buffer, (visit) => weights.stream(visit), offsets, form.weights),
    shared,
  );
  const weightBuffer = placed.buffer;
  const w = (name: string) => weightBuffer.ptr + offsets.get(name)!;
  const pair = (prefix: string) => ({ weight: w(`${prefix}.weight`), bias: w(`${prefix}.bias`) });

  const { cache, acts, free } = allocateBeside(
    backend,
    placed,
    cfg,
    form,
    activationLayout(backend, cfg, rows, form.batch),
  );

  const buffers: ModelBuffers = {
    config: cfg,
    batch: form.batch,
    dtypes: dtypeCodes(form),
    wte: w("wte.weight"),
    wpe: w("wpe.weight"),
    layers: Array.from({ length: cfg.n_layer }, (_, i) => ({
      ln_1: pair(`h.${i}.ln_1`),
      c_attn: pair(`h.${i}.attn.c_attn`),
      attn_c_proj: pair(`h.${i}.attn.c_proj`),
      ln_2: pair(`h.${i}.ln_2`),
      c_fc: pair(`h.${i}.mlp.c_fc`),
      mlp_c_proj: pair(`h.${i}.mlp.c_proj`),
    })),
    ln_f: pair("ln_f"),
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
    parameters: weightBuffer,
    free,
  };
}

/** GPT-2's weights in one arena: each parameter's offset, matrices in the weight dtype. */
function weightLayout(cfg: GPT2Config, form: Pick<StepForm, "weights">) {
  const { arena, offsets } = parameterArena(parameterSpecs(cfg), form.weights);
  return { offsets, size: arena.size };
}

/** What placeModel allocates for these steps, computed from the same layouts. */
export function gpt2PlacementBytes(
  backend: Backend,
  cfg: GPT2Config,
  form: StepForm,
  maxRows?: number,
): PlacementBytes {
  return {
    weights: weightLayout(cfg, form).size,
    cache: cacheBytes(cfg, form),
    activations: activationLayout(backend, cfg, rowsHeld(cfg, form, maxRows), form.batch).size,
  };
}

function activationLayout(backend: Backend, cfg: GPT2Config, rows: number, batch: number) {
  const C = cfg.n_embd;
  const arena = new Arena();
  const at = {
    x: arena.reserve(rows * C * FLOAT),
    ln: arena.reserve(rows * C * FLOAT),
    qkv: arena.reserve(rows * (C + 2 * kvWidth(cfg)) * FLOAT),
    att: arena.reserve(rows * C * FLOAT),
    proj: arena.reserve(rows * C * FLOAT),
    fc: arena.reserve(rows * 4 * C * FLOAT),
    act: arena.reserve(rows * 4 * C * FLOAT),
    logits: arena.reserve(batch * cfg.vocab_size * FLOAT),
    scratch: arena.reserve(
      Math.max(
        FLOAT,
        backend.attentionScratchBytes(rows, C, cfg.n_head, kvHeads(cfg), cfg.n_positions),
        backend.attentionScratchBytes(1, C, cfg.n_head, kvHeads(cfg), cfg.n_positions),
      ),
    ),
    // every linear reads at most 4C and writes at most 4C (the MLP); the LM head and argmax span the vocabulary;
    // a step's linears have up to `rows` rows (a prefill's T rows, too, take the merging matvec when T <= 8)
    partials: arena.reserve(Math.max(FLOAT, backend.partialsBytes(rows, 4 * C, 4 * C, cfg.vocab_size))),
    seq: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    sink: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    state: arena.reserve(batch * STATE_INTS * INT32),
  };
  return { at, size: arena.size };
}

/**
 * The buffers as sequence b alone sees them: its state, tokens, logits and cache rows, as a batch of one.
 * A prefill runs one sequence at a time through such a view (its T rows use the shared activations).
 */
export function sequenceView(m: ModelBuffers, b: number): ModelBuffers {
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
