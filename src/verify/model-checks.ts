// Whole-model checks of a device backend (CUDA, or the CUDA sources emulated on the CPU) against the
// fixtures and the CPU backend: logits, greedy tokens in every launch mode, cache exactness, and that
// graph replays leave device memory where it was.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import type { Backend } from "../backends/backend.ts";
import type { ModelWeights } from "../model/architectures.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, type PlanKind } from "../plan.ts";
import { generate } from "../run/generate.ts";
import { availableModes, launchMode, type LaunchMode } from "../run/launch-modes.ts";
import { Session } from "../run/session.ts";
import { maxRelativeError } from "./compare.ts";

export const LOGIT_TOLERANCE = 1e-4; // relative to the largest |logit|
/** two logits this close (relative to the largest) are a tie that summation order may break either way */
export const NEAR_TIE = 1e-5;

export interface CheckRow {
  check: string;
  detail: string;
  /** the measured error, where the check has one */
  error: number | null;
  status: "pass" | "fail" | "skip";
}

const row = (check: string, detail: string, ok: boolean, error: number | null = null): CheckRow => ({
  check,
  detail,
  error,
  status: ok ? "pass" : "fail",
});

export interface Fixture {
  name: string;
  dir: string;
  prompt: number[];
  generated: number[];
  sequence: number[];
  logits: Float32Array;
}

export function readFixture(dir: string): Fixture {
  const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
  const bytes = readFileSync(join(dir, "expected_logits.f32"));
  return {
    name: dir.split("/").pop()!,
    dir,
    prompt: expected.prompt,
    generated: expected.generated,
    sequence: expected.sequence,
    logits: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)),
  };
}

/** The fixture's logits at every position and its greedy continuation in every launch mode, cached and not. */
export function fixtureChecks(
  device: Backend,
  weights: ModelWeights,
  f: Fixture,
  plan: PlanKind = "fused",
): CheckRow[] {
  const s = new Session(device, weights, { form: { ...DEFAULT_STEP_FORM, plan } });
  try {
    const err = maxRelativeError(s.logitsAtEveryPosition(f.sequence), f.logits);
    const rows = [
      row(`${f.name} logits`, `${f.sequence.length} positions vs numpy float64`, err <= LOGIT_TOLERANCE, err),
    ];
    const runs: Array<[boolean, LaunchMode]> = [
      ...availableModes(device, s.modeForm).map((m): [boolean, LaunchMode] => [true, m]),
      [false, launchMode("eager")],
    ];
    for (const [cache, mode] of runs) {
      const ids = generate(s, { prompt: f.prompt, maxNewTokens: f.generated.length, cache, mode }).generatedIds;
      const same = ids.every((id, i) => id === f.generated[i]);
      rows.push(
        row(
          `${f.name} greedy`,
          `${f.generated.length} tokens, ${cache ? `cached, ${mode.name}, ${plan}` : "uncached"}`,
          same,
        ),
      );
    }
    return rows;
  } finally {
    s.close();
  }
}

/** The device's logits against the CPU backend's, every position of a prompt, on the same weights. */
export function againstCpu(device: Backend, cpu: Backend, weights: ModelWeights, prompt: number[]): CheckRow {
  const logits = (b: Backend) => {
    const s = new Session(b, weights, { maxRows: prompt.length });
    try {
      return s.logitsAtEveryPosition(prompt);
    } finally {
      s.close();
    }
  };
  const err = maxRelativeError(logits(device), logits(cpu));
  return row(
    `${weights.config.name} vs CPU`,
    `logits at ${prompt.length} positions (${weights.source})`,
    err <= LOGIT_TOLERANCE,
    err,
  );
}

/** Every launch mode generates the same tokens, and leaves bit-identical logits. */
export function modesBitIdentical(
  device: Backend,
  weights: ModelWeights,
  prompt: number[],
  n: number,
  plan: PlanKind = "fused",
): CheckRow {
  const s = new Session(device, weights, { form: { ...DEFAULT_STEP_FORM, plan } });
  try {
    const modes = availableModes(device, s.modeForm);
    const runs = modes.map((mode) => {
      const ids = generate(s, { prompt, maxNewTokens: n, cache: true, mode }).generatedIds;
      return { mode, ids, logits: new Uint32Array(s.readLogits().buffer) };
    });
    const [first, ...rest] = runs;
    const same = rest.every(
      (r) => r.ids.every((id, i) => id === first!.ids[i]) && r.logits.every((w, i) => w === first!.logits[i]),
    );
    return row(
      "launch modes",
      `${modes.map((m) => m.name).join(" == ")} bit for bit over ${n} tokens, ${plan} plan`,
      same,
    );
  } finally {
    s.close();
  }
}

/**
 * Cached and uncached greedy tokens agree. They run different kernels (matvec vs tiled) that sum in different
 * orders, so where they part the two choices must be a near-tie of the full-recompute logits (≤ 1e-5 of the
 * largest |logit|); anything wider is a failure.
 */
export function cachedEqualsUncached(
  device: Backend,
  weights: ModelWeights,
  prompt: number[],
  n: number,
  plan: PlanKind = "fused",
): CheckRow {
  const s = new Session(device, weights, { form: { ...DEFAULT_STEP_FORM, plan } });
  try {
    const eager = launchMode("eager");
    const cached = generate(s, { prompt, maxNewTokens: n, cache: true, mode: eager }).generatedIds;
    const uncached = generate(s, { prompt, maxNewTokens: n, cache: false, mode: eager }).generatedIds;
    const at = cached.findIndex((id, i) => id !== uncached[i]);
    if (at < 0) return row("cache exactness", `cached (${plan}) == uncached greedy tokens over ${n} tokens`, true);
    const V = weights.config.vocab_size;
    const prefix = [...prompt, ...cached.slice(0, at)];
    const logits = s.logitsAtEveryPosition(prefix).subarray((prefix.length - 1) * V);
    const scale = logits.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    const gap = Math.abs(logits[cached[at]!]! - logits[uncached[at]!]!) / scale;
    const detail = `cached and uncached part at token ${at} of ${n}, where the two choices' logits differ by ${gap.toExponential(1)} of the largest`;
    return row("cache exactness", detail, gap <= NEAR_TIE, gap);
  } finally {
    s.close();
  }
}

/**
 * The fused and unfused plans generate the same tokens and, where they do, end on logits within tolerance of
 * each other. They sum in different orders, so where their tokens part the two choices must be a near-tie of
 * the full-recompute logits (as for cached and uncached).
 */
export function plansAgree(device: Backend, weights: ModelWeights, prompt: number[], n: number): CheckRow {
  const runs = PLAN_KINDS.map((plan) => {
    const s = new Session(device, weights, { form: { ...DEFAULT_STEP_FORM, plan } });
    try {
      const ids = generate(s, { prompt, maxNewTokens: n, cache: true, mode: launchMode("eager") }).generatedIds;
      return { plan, ids, logits: s.readLogits(), session: s };
    } catch (e) {
      s.close();
      throw e;
    }
  });
  try {
    const [fused, unfused] = runs as [(typeof runs)[0], (typeof runs)[0]];
    const at = fused.ids.findIndex((id, i) => id !== unfused.ids[i]);
    if (at < 0) {
      const err = maxRelativeError(fused.logits, unfused.logits);
      return row(
        "plans",
        `fused == unfused greedy tokens over ${n} tokens; last logits within ${err.toExponential(1)}`,
        err <= LOGIT_TOLERANCE,
        err,
      );
    }
    const prefix = [...prompt, ...fused.ids.slice(0, at)];
    const V = weights.config.vocab_size;
    const logits = fused.session.logitsAtEveryPosition(prefix).subarray((prefix.length - 1) * V);
    const scale = logits.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    const gap = Math.abs(logits[fused.ids[at]!]! - logits[unfused.ids[at]!]!) / scale;
    return row(
      "plans",
      `fused and unfused part at token ${at} of ${n}, a gap of ${gap.toExponential(1)} of the largest logit`,
      gap <= NEAR_TIE,
      gap,
    );
  } finally {
    for (const r of runs) r.session.close();
  }
}

/** A captured graph replayed many times allocates nothing: free device memory is unchanged. */
export function graphMemoryStable(device: Backend, weights: ModelWeights, replays: number): CheckRow {
  if (!device.graphs)
    return { check: "graph memory", detail: "no graphs on this backend", error: null, status: "skip" };
  const s = new Session(device, weights);
  try {
    s.prefill([0]);
    const native = s.step(1).native();
    native.runGraph!(1); // capture and instantiate before the baseline
    device.synchronize();
    const before = device.memInfo().free;
    for (let i = 0; i < replays; i++) {
      s.setPosition(1);
      native.runGraph!(1);
    }
    device.synchronize();
    const leaked = before - device.memInfo().free;
    return row("graph memory", `${replays} replays; free memory changed by ${leaked} bytes`, leaked === 0, leaked);
  } finally {
    s.close();
  }
}

/** A fixture directory if present (gpt2-mini lives beside the project, not in it). */
export function findFixture(candidates: string[]): string | null {
  return candidates.find((d) => existsSync(join(d, "expected.json"))) ?? null;
}
