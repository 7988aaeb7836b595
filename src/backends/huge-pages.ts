// How much of some host buffers the kernel backs with transparent huge pages (2 MiB), from /proc/self/smaps. The
// CPU library asks for them for the weights and the read passes' buffers (madvise, advice only); on the development
// VM a matvec read 1.05–1.11× faster from them than from 4 KiB pages (docs/measurements.md), so a step's ratio to
// its read floor compares like with like only where both are paged alike.
import { readFileSync } from "node:fs";

/** Bytes of the mappings that hold some buffers: resident (Rss), and of that in transparent huge pages. */
export interface PageShare {
  resident: number;
  huge: number;
}

const KIB = 1024;
const MAPPING = /^([0-9a-f]+)-([0-9a-f]+) /;
const FIELD = /^(Rss|AnonHugePages):\s+(\d+) kB$/;

/**
 * Rss and AnonHugePages of the mappings in `smaps` (the text of /proc/<pid>/smaps) that overlap any of `ranges`
 * ([start, end) addresses), each mapping counted once: the kernel merges neighbouring mappings of the same flags, so
 * a buffer's mapping may also hold its neighbours.
 */
export function pagesOfMappings(smaps: string, ranges: readonly (readonly [number, number])[]): PageShare {
  const share: PageShare = { resident: 0, huge: 0 };
  let counted = false;
  for (const line of smaps.split("\n")) {
    const mapping = MAPPING.exec(line);
    if (mapping) {
      const [start, end] = [Number.parseInt(mapping[1]!, 16), Number.parseInt(mapping[2]!, 16)];
      counted = ranges.some(([from, to]) => from < end && start < to);
      continue;
    }
    const field = counted ? FIELD.exec(line) : null;
    if (field) share[field[1] === "Rss" ? "resident" : "huge"] += Number(field[2]) * KIB;
  }
  return share;
}

/**
 * pagesOfMappings for each group of buffers of this process, from one read of /proc/self/smaps; null where it cannot
 * be read (not Linux).
 */
export function hostPageShares(groups: readonly (readonly { ptr: number; bytes: number }[])[]): PageShare[] | null {
  let smaps: string;
  try {
    smaps = readFileSync("/proc/self/smaps", "utf8");
  } catch {
    return null;
  }
  return groups.map((buffers) =>
    pagesOfMappings(
      smaps,
      buffers.map((b) => [b.ptr, b.ptr + b.bytes]),
    ),
  );
}

/** The share of the resident bytes in huge pages (0 where none is resident). */
export const hugeShare = (s: PageShare) => (s.resident > 0 ? s.huge / s.resident : 0);

/** "97%" of the resident bytes in huge pages, or "none resident". */
export const hugeShareText = (s: PageShare) =>
  s.resident > 0 ? `${Math.round(100 * hugeShare(s))}%` : "none resident";
