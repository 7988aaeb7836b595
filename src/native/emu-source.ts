// The emulator's copy of a CUDA source (cuda/emu/cuda_emu.h): each shared-memory declaration becomes the running
// emulated block's own memory. No macro can say that: `static` is one copy for all blocks, and a section attribute
// that could gather the statics for a per-block swap is dropped by g++ on statics in templates (GCC bug 70435),
// where every kernel's shared memory is declared.
//   __shared__ T name[dims];     → auto& name = ::emu::block_shared<T[dims]>([] {});   (dims optional)
//   extern __shared__ T name[];  → T* const name = ::emu::dynamic_shared<T>();
// One declaration a line, at the line's start; a line keeps its number, and the copy opens with #line 1 naming the
// original, so diagnostics and debug line info point there.

/** `[extern] __shared__ T name[dims];` at a line's start: indent, extern, type, name, dims. */
const DECLARATION = /^([ \t]*)(extern[ \t]+)?__shared__[ \t]+([^;\n]+?)[ \t]+(\w+)[ \t]*((?:\[[^\]\n]*\][ \t]*)*);/gm;

/** Whether a comma in `type` stands outside its <> and (): two declarators, not one type. */
function listsDeclarators(type: string): boolean {
  let depth = 0;
  for (const c of type) {
    if (c === "<" || c === "(") depth++;
    else if (c === ">" || c === ")") depth--;
    else if (c === "," && depth === 0) return true;
  }
  return false;
}

/** The emulator's copy of `text`, the source at `path`; throws on a __shared__ outside a declaration it translates. */
export function emuSource(text: string, path: string): string {
  const translated = text.replace(
    DECLARATION,
    (whole, indent: string, extern: string | undefined, type: string, name: string, dims: string) => {
      if (listsDeclarators(type)) return whole; // left for the check below
      if (!extern) return `${indent}auto& ${name} = ::emu::block_shared<${type}${dims.trimEnd()}>([] {});`;
      if (dims.replace(/[ \t]/g, "") !== "[]") return whole; // not the dynamic form: left for the check below
      return `${indent}${type}* const ${name} = ::emu::dynamic_shared<${type}>();`;
    },
  );
  translated.split("\n").forEach((line, i) => {
    if (/\b__shared__\b/.test(line.replace(/\/\/.*/, ""))) {
      throw new Error(
        `build emu: ${path}:${i + 1}: a __shared__ the emulator's build does not translate (one declaration a line, ` +
          "at its start: `__shared__ T name[dims];` or `extern __shared__ T name[];`)",
      );
    }
  });
  return `#line 1 ${JSON.stringify(path)}\n${translated}`;
}
