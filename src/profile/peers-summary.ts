// From the peers' measurements to summary.json's `peers` section: per subject and context the time per
// token, set against the project's fastest mode and the memory floor measured in the same run, and each
// subject's greedy tokens against the project's.
import type { PeerSubject } from "../peers/peer-set.ts";
import type { PeerDispatchSplit } from "../peers/process.ts";
import { summarize } from "../stats.ts";
import type { PeerAgreement, PeerResult, PeersSection } from "./types.ts";

/** What the study collected from its peers. */
export interface PeerMeasurements {
  subjects: readonly PeerSubject[];
  /** subject id → context → ms per token */
  samples: ReadonlyMap<string, ReadonlyMap<number, readonly number[]>>;
  traces: readonly PeerDispatchSplit[];
  /** subject id → greedy tokens for the prompt */
  generated: ReadonlyMap<string, readonly number[]>;
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

/** Tokens that agree with the reference before the first difference. */
export function agreementOf(tokens: readonly number[], reference: readonly number[]): PeerAgreement {
  let matched = 0;
  while (matched < reference.length && tokens[matched] === reference[matched]) matched++;
  return { matched, of: reference.length, agrees: matched === reference.length, tokens: [...tokens] };
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
      agreement: tokens ? agreementOf(tokens, y.reference) : null,
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
