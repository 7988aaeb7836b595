// How a cached decode step is launched: each launch mode is one value here, and everything else (sessions,
// the study, generate, bench, reports) takes modes from this list. Adding a mode is one entry.
import type { Backend } from "../backends/backend.ts";
import type { PersistentStepBuild } from "../native/kernel-facts.ts";
import { gridBarrierUs, type LaunchFloor } from "../backends/instrument.ts";
import { UserError } from "../errors.ts";
import { familyOf, headDimOf, type ModelConfig } from "../model/architectures.ts";
import { DTYPE_BYTES } from "../ops.ts";
import type { StepForm } from "../plan.ts";
import type { CompiledStep } from "./step.ts";

/**
 * What a mode's availability depends on besides the backend: the cached step's plan, storage types, head width and
 * whether its q and k columns are rotated (a rotary model's).
 */
export type ModeForm = Pick<StepForm, "plan" | "weights" | "kv"> & { headDim: number; rotary: boolean };

/** A step form with the model's head width and rotation, as the modes judge it. */
export const modeForm = (step: Pick<StepForm, "plan" | "weights" | "kv">, cfg: ModelConfig): ModeForm => ({
  plan: step.plan,
  weights: step.weights,
  kv: step.kv,
  headDim: headDimOf(cfg),
  rotary: familyOf(cfg).rotary,
});

export interface LaunchMode {
  readonly name: string;
  /** what issues the step (README, reports) */
  readonly issuedBy: string;
  /** the mode as the subject of a verdict: "graph replay removes 0.4 ms per token" */
  readonly phrase: string;
  /** whether each op of the step is a kernel of its own (a trace then splits the step by op) */
  readonly kernelPerOp: boolean;
  /** whether the backend runs a step of this form in this mode */
  available(backend: Backend, step: ModeForm): boolean;
  /** what the backend lacks to run any step in this mode (e.g. "no CUDA graphs"), or null where some step can */
  lacks(backend: Backend): string | null;
  /** `n` steps back to back with no host synchronisation between them (asynchronous on CUDA) */
  run(step: CompiledStep, n: number): void;
  /**
   * The measured cost of dispatching one op in this mode, from the empty-op launch floor; `issueUsPerOp` is
   * the eager step's host issue time per op where issuing is asynchronous (a GPU), else null.
   */
  floorUs(launch: LaunchFloor, issueUsPerOp: number | null): number;
}

/** What a backend lacks for each native replay mode, or null (LaunchMode.lacks). */
const graphsLacked = (b: Backend) => (b.graphs ? null : "it has no CUDA graphs (a GPU's)");
const pdlLacked = (b: Backend) =>
  b.graphs && b.programmaticLaunch
    ? null
    : "it has no CUDA graphs with programmatic dependent launch (a Hopper GPU's or newer)";
const persistentLacked = (b: Backend) =>
  b.persistentStep === null ? "it has no persistent step kernel (a GPU's)" : null;

export const LAUNCH_MODES = [
  {
    name: "eager",
    issuedBy: "TypeScript walks the plan, one FFI call per kernel launch (like a Python framework)",
    phrase: "launching from TypeScript",
    kernelPerOp: true,
    available: () => true,
    lacks: () => null,
    run: (step, n) => {
      for (let i = 0; i < n; i++) step.runEager();
    },
    floorUs: (launch, issueUsPerOp) =>
      issueUsPerOp === null ? launch.host_us : Math.max(launch.host_us, issueUsPerOp),
  },
  {
    name: "eager-native",
    issuedBy: "one FFI call; C++ launches the same kernels in a loop (launch cost without an interpreter)",
    phrase: "issuing the plan natively",
    kernelPerOp: true,
    available: () => true,
    lacks: () => null,
    run: (step, n) => step.native().runNative(n),
    floorUs: (launch) => launch.host_us,
  },
  {
    name: "graph",
    issuedBy: "the eager sequence captured once as a CUDA graph, replayed with one launch per token",
    phrase: "graph replay",
    kernelPerOp: true,
    available: (backend) => graphsLacked(backend) === null,
    lacks: graphsLacked,
    run: (step, n) => step.native().runGraph!(n),
    floorUs: (launch) => launch.graph_node_us ?? launch.host_us,
  },
  {
    name: "graph-pdl",
    issuedBy:
      "the same graph captured with programmatic dependent launch: each kernel may start while its predecessor finishes (loading its weights) and waits for its output in-kernel",
    phrase: "graph replay with programmatic dependent launch",
    kernelPerOp: true,
    available: (backend) => pdlLacked(backend) === null,
    lacks: pdlLacked,
    run: (step, n) => step.native().runGraphPdl!(n),
    floorUs: (launch) => launch.pdl_node_us ?? launch.graph_node_us ?? launch.host_us,
  },
  {
    name: "persistent",
    issuedBy:
      "one cooperative kernel per token: its resident blocks run the fused plan's ops as tasks, a grid barrier between ops instead of a kernel boundary (cuda/persistent.cu)",
    phrase: "the persistent step kernel",
    // its ops are tasks inside one kernel: a trace sees one record per step, not one per op
    kernelPerOp: false,
    available: (backend, step) => backend.persistentStep !== null && persistentStepRuns(step, backend.persistentStep),
    lacks: persistentLacked,
    run: (step, n) => step.native().runPersistent!(n),
    // no launch per op (one graph node per token, ~1 µs against a step of ~0.1 ms): what dispatches an op is the
    // grid barrier before it, at the dearer of its two arrival patterns
    floorUs: (launch) => gridBarrierUs(launch) ?? 0,
  },
] as const satisfies readonly LaunchMode[];

export type LaunchModeName = (typeof LAUNCH_MODES)[number]["name"];
export const LAUNCH_MODE_NAMES: readonly LaunchModeName[] = LAUNCH_MODES.map((m) => m.name);

export function launchMode(name: LaunchModeName): LaunchMode {
  return LAUNCH_MODES.find((m) => m.name === name)!;
}

/**
 * Why the persistent step kernel is not built for a step of this form, or null where it is: it holds the fused
 * plan's bodies, the cache in the weights' storage type, heads no wider than its attention body, and, where q and k
 * are rotated, heads whose rows fill whole matvec tiles (its rotating q/k/v body is the 16-byte variant only:
 * cuda/linear.cu launch_matvec).
 */
export function persistentStepRefusal(step: ModeForm, built: PersistentStepBuild): string | null {
  const rowBytes = step.headDim * DTYPE_BYTES[step.weights];
  if (step.plan !== "fused") return "the persistent step runs the fused plan only";
  if (step.kv !== step.weights) return "the persistent step holds the cache in the weights' storage type only";
  if (step.headDim > built.maxHeadDim)
    return `the persistent step's attention body holds heads of up to ${built.maxHeadDim}`;
  if (step.rotary && rowBytes % built.rotaryTileBytes !== 0)
    return `the persistent step's rotating q/k/v body needs a head's row in whole ${built.rotaryTileBytes}-byte tiles, and a ${step.weights} head of ${step.headDim} is ${rowBytes} bytes`;
  return null;
}

export const persistentStepRuns = (step: ModeForm, built: PersistentStepBuild) =>
  persistentStepRefusal(step, built) === null;

/** The error for a mode this backend cannot run a step of this form in, naming the modes it can (and `more` choices). */
export function unavailableMode(
  name: string,
  backend: Backend,
  step: ModeForm,
  more: readonly string[] = [],
): UserError {
  const available = [...availableModes(backend, step).map((m) => m.name), ...more];
  const lacks = LAUNCH_MODES.find((m) => m.name === name)?.lacks(backend);
  if (lacks)
    return new UserError(
      `launch mode ${name} is not available on the ${backend.kind} backend: ${lacks} (available: ${available.join(", ")})`,
    );
  const why = name === "persistent" && backend.persistentStep && persistentStepRefusal(step, backend.persistentStep);
  return new UserError(
    `launch mode ${name} is not available on the ${backend.kind} backend for the ${step.plan} plan with weights ${step.weights}, cache ${step.kv} and heads of ${step.headDim}${why ? `: ${why}` : ""} (available: ${available.join(", ")})`,
  );
}

/** The modes this backend can run a step of this form in, in list order. */
export function availableModes(backend: Backend, step: ModeForm): LaunchMode[] {
  return LAUNCH_MODES.filter((m) => m.available(backend, step));
}

/** The plan recorded natively: captured as a graph where the backend has graphs, else issued natively. */
export function replayMode(backend: Backend): LaunchMode {
  return launchMode(backend.graphs ? "graph" : "eager-native");
}
