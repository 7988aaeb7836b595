// The built library's kernels by name, as its SASS and a kernel trace show them: an op's kernel is
// `<family>_kernel` (src/ops.ts kernelFamily) unless named below, templated as its source declares it, with the
// template arguments the kernels' facts give (elements per 16-byte access, batch buckets).
import type { DtypeName, OpFamily } from "../ops.ts";
import { perAccess, rowBucket, type KernelFacts } from "./kernel-facts.ts";

/** The C++ element type of each storage type (cuda/dtypes.h). */
const ELEMENT_TYPES: Readonly<Record<DtypeName, string>> = { f32: "float", bf16: "__nv_bfloat16", f16: "__half" };
export const elementType = (dtype: DtypeName) => ELEMENT_TYPES[dtype];

/**
 * How each op's decode kernel is templated (cuda/<family>.cu, .h):
 *   weights  <W, kWidth, kRows>: the weights' storage type, its elements per access and the batch bucket; the
 *            body is the decode matvec (cuda/linear.h) or the LM head's (cuda/lm_head.h)
 *   storage  <K, kWidth>: one storage type (the argument named by `dtype`) and its elements per access
 *   width    <kWidth>: floats per access
 *   none     not templated
 */
export type KernelTemplate =
  | { of: "weights"; body: "matvec" | "lm_head" }
  | { of: "storage"; dtype: "wdtype" | "kvdtype" }
  | { of: "width" }
  | { of: "none" };

export const DECODE_KERNELS: Readonly<Record<OpFamily, KernelTemplate & { name?: string }>> = {
  embed: { of: "storage", dtype: "wdtype" },
  layernorm: { of: "width" },
  linear: { of: "weights", body: "matvec", name: "linear_matvec_kernel" },
  kv_append: { of: "storage", dtype: "kvdtype" },
  attention: { of: "storage", dtype: "kvdtype" },
  gelu: { of: "none" },
  residual: { of: "none" },
  lm_head: { of: "weights", body: "lm_head" },
  argmax: { of: "width" },
  ln_qkv: { of: "weights", body: "matvec" },
  ln_linear_gelu: { of: "weights", body: "matvec" },
  linear_residual: { of: "weights", body: "matvec" },
  ln_lm_head_argmax: { of: "weights", body: "lm_head" },
  rmsnorm: { of: "width" },
  rope: { of: "none" },
  swiglu: { of: "width" },
  rms_qkv_rope: { of: "weights", body: "matvec" },
  rms_gate_up: { of: "weights", body: "matvec" },
  rms_lm_head_argmax: { of: "weights", body: "lm_head" },
};

/** The body an op's kernel runs where it is the decode matvec's or the LM head's, else null. */
export function bodyOf(family: OpFamily): "matvec" | "lm_head" | null {
  const k = DECODE_KERNELS[family];
  return k.of === "weights" ? k.body : null;
}
/** Op families whose kernel runs the decode matvec's body, or the LM head's. */
export const familiesWithBody = (body: "matvec" | "lm_head"): OpFamily[] =>
  (Object.keys(DECODE_KERNELS) as OpFamily[]).filter((f) => bodyOf(f) === body);

/**
 * The 16-byte-access instantiation of an op's decode kernel (rows <= MAX_BATCH): `dtype` is the storage type its
 * template takes (the weights', or for a storage kernel the one its `dtype` names), `rows` its sequences.
 */
export function decodeKernel(facts: KernelFacts, family: OpFamily, dtype: DtypeName, rows: number): string {
  const k = DECODE_KERNELS[family];
  const name = k.name ?? `${family}_kernel`;
  switch (k.of) {
    case "weights":
      return `${name}<${elementType(dtype)}, ${perAccess(facts, dtype)}, ${rowBucket(facts, rows)}>`;
    case "storage":
      return `${name}<${elementType(dtype)}, ${perAccess(facts, dtype)}>`;
    case "width":
      return `${name}<${perAccess(facts, "f32")}>`;
    case "none":
      return name;
  }
}

/** op_attention's kernel for heads wider than the fast path's (cuda/attention.cu), on cache `kv`. */
export const wideAttentionKernel = (facts: KernelFacts, kv: DtypeName) =>
  `attention_wide_kernel<${elementType(kv)}, ${perAccess(facts, kv)}>`;

/** op_linear's kernel for more than MAX_BATCH rows (prefill): a tiled matrix product on weights in `dtype`. */
export const tiledLinearKernel = (dtype: DtypeName) => `linear_tiled_kernel<${elementType(dtype)}>`;

/** The architectures' steps the persistent kernel is instantiated for (cuda/persistent.cu Gpt2Step, LlamaStep). */
export const STEP_ARCHS = ["Gpt2Step", "LlamaStep"] as const;
export type StepArch = (typeof STEP_ARCHS)[number];
/**
 * The persistent step kernel (cuda/persistent.cu), and its instantiation for an architecture's step, weights and
 * cache in `dtype` and `rows` rows.
 */
export const PERSISTENT_STEP_KERNEL = "persistent_step_kernel";
export const persistentStepKernel = (facts: KernelFacts, arch: StepArch, dtype: DtypeName, rows: number) =>
  `${PERSISTENT_STEP_KERNEL}<${arch}, ${elementType(dtype)}, ${rowBucket(facts, rows)}>`;
