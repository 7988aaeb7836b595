// From the peers' measurements to summary.json's `peers` section: per subject and context the time per
// token, set against the project's fastest mode and the memory floor measured in the same run, and each
// subject's greedy tokens against the project's.
import type { PeerSubject } from "../peers/peer-set.ts";
import type { PeerDispatchSplit } from "../peers/process.ts";
import { summarize } from "../stats.ts";
import type { PeerAgreement, PeerParting, PeerResult, PeersSection } from "./types.ts";

/** What the study collected from its peers. */
export interface PeerMeasurements {
  subjects: readonly PeerSubject[];
  /** subject id → context → ms per token */
  samples: ReadonlyMap<string, ReadonlyMap<number, readonly number[]>>;
  traces: readonly PeerDispatchSplit[];
  /** subject id → greedy tokens for the prompt */
  generated: ReadonlyMap<string, readonly number[]>;
  /** subject id → where its tokens part from the project's (partingOf), for the subjects that part */
  partings: ReadonlyMap<string, PeerParting>;
  skipped: readonly { name: string; reason: string }[];
}

export interface PeerYardsticks {
  prompt: readonly number[];
  /** the project's greedy tokens for the prompt */
  reference: readonly number[];
  /** the project's fastest cached mode at a context, by untraced median */
  bestAt: (context: number) => { mode: string; ms: number } | null;
  /** the cached step's bytes at the measured read bandwidth (ms), when measured */
  floorAt: (context: number) => number | null;
  method: string;
}

/** How many leading tokens agree with the reference. */
export function tokensBeforeParting(tokens: readonly number[], reference: readonly number[]): number {
  let matched = 0;
  while (matched < reference.length && tokens[matched] === reference[matched]) matched++;
  return matched;
}

/** Tokens that agree with the reference before the first difference, and how the project ranked the peer's there. */
export function agreementOf(
  tokens: readonly number[],
  reference: readonly number[],
  parted: PeerParting | null = null,
): PeerAgreement {
  const matched = tokensBeforeParting(tokens, reference);
  const agrees = matched === reference.length;
  return { matched, of: reference.length, agrees, tokens: [...tokens], parted: agrees ? null : parted };
}

/** The peer's token `theirs` among the project's logits (V) at the step where the project chose `ours`. */
export function partingOf(logits: Float32Array, ours: number, theirs: number): PeerParting {
  const at = logits[theirs]!;
  let rank = 1,
    largest = 0;
  for (const l of logits) {
    if (l > at) rank++;
    largest = Math.max(largest, Math.abs(l));
  }
  return { rank, margin: largest > 0 ? (logits[ours]! - at) / largest : 0 };
}

export function buildPeersSection(m: PeerMeasurements, y: PeerYardsticks): PeersSection {
  const ratio = (a: number, b: number | null) => (b === null || b <= 0 ? null : a / b);
  const results = m.subjects.map((s): PeerResult => {
    const byContext = m.samples.get(s.id) ?? new Map<number, readonly number[]>();
    const points = [...byContext]
      .filter(([, ms]) => ms.length > 0)
      .map(([context, ms]) => {
        const stats = summarize(ms);
        const best = y.bestAt(context);
        const floor = y.floorAt(context);
        return {
          context,
          ms: stats,
          best_mode: best?.mode ?? null,
          best_mode_ms: best?.ms ?? null,
          ratio_to_best_mode: ratio(stats.median, best?.ms ?? null),
          floor_ms: floor,
          ratio_to_floor: ratio(stats.median, floor),
        };
      });
    const tokens = m.generated.get(s.id);
    return {
      id: s.id,
      peer: s.peer,
      variant: s.variant,
      short: s.short,
      label: s.label,
      version: s.version,
      device: s.device,
      settings: s.settings,
      points,
      agreement: tokens ? agreementOf(tokens, y.reference, m.partings.get(s.id) ?? null) : null,
    };
  });
  return {
    method: y.method,
    prompt_ids: [...y.prompt],
    reference_tokens: [...y.reference],
    results,
    torch_dispatch: [...m.traces],
    skipped: [...m.skipped],
  };
}
