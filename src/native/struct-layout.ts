// C structs that TypeScript reads field by field (CuDeviceInfo, the CUPTI tracer's records): each struct's
// size and its fields' byte offsets, named as in C. test/abi-layout.test.ts compiles the C header and checks
// every number here against sizeof and offsetof.

export interface StructLayout<F extends string = string> {
  /** the C struct's name, and the header under cuda/ that declares it */
  struct: string;
  header: string;
  bytes: number;
  fields: Readonly<Record<F, number>>;
}

/** Bytes from a field's offset to the next field's (or the struct's end): a char array's capacity. */
export function fieldBytes<F extends string>(layout: StructLayout<F>, field: F): number {
  const start = layout.fields[field];
  const later = Object.values<number>(layout.fields).filter((o) => o > start);
  return (later.length ? Math.min(...later) : layout.bytes) - start;
}

const utf8 = new TextDecoder();

/** The NUL-terminated string in `bytes[offset, offset + cap)`. */
export function cString(bytes: Uint8Array, offset: number, cap: number): string {
  const field = bytes.subarray(offset, offset + cap);
  const end = field.indexOf(0);
  return utf8.decode(end < 0 ? field : field.subarray(0, end));
}
