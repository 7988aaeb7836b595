// Counts in prose: "1 token", "2 tokens".

/** `n` and its noun, singular for one: counted(1, "thread") is "1 thread", counted(2, "thread") "2 threads". */
export const counted = (n: number, noun: string, plural = `${noun}s`): string =>
  `${n.toLocaleString("en-US")} ${n === 1 ? noun : plural}`;
