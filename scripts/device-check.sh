#!/usr/bin/env bash
# The one prepared script for a lent GPU (an H200 here): the device has CUDA and Python but no Bun, Node.js or
# registry, so the CLIs travel bundled, with Bun xz-compressed (unpacked by ../shared/device/pack-bun.sh's
# unpack-bun.sh) and the GPU libraries built and checked here.
#
#   here:    scripts/device-check.sh pack      # → .device/ (git-ignored): bun.xz, unpack-bun.sh, app.tar.xz (the
#                                              #   CLIs, their shared code in chunks), build/ (the CUDA library
#                                              #   without PTX, xz-compressed, the CUPTI library, their stamps);
#                                              #   fails when the whole transfer (tree + .device) is over 62 MiB
#                                              #   of the device's 64
#   device:  run(command="bash scripts/device-check.sh run", carry=[".device"], timeout_s=420)
#   here:    REHEARSE=1 OUT=/tmp/out scripts/device-check.sh run   # the same steps on the CPU emulator, gpt2-tiny
#
# `run` takes the steps of BUDGET in order of value, so a run cut short still answers the most: the cheap ones
# (unpack, build, the hot kernels' SASS), the fused plan's profile in every launch mode with the interventions,
# bit-identity of the generated tokens across the launch modes on test/fixtures/gpt2-tiny, verify, Llama-3.2-1B's
# profile in bf16 in every launch mode to 8192 tokens of context with prompt caching at 1024 and 8192, the unfused
# plan's profile, the PyTorch peer
# without torch.compile, compute-sanitizer on the persistent step kernel, and
# last, with the time left, the peer's torch.compile (a cold compile alone takes 30-90 s). It builds only the
# CPU library there (for its processor: -march=native) and uses the carried CUDA and CUPTI libraries when their
# sources stamp matches (DECODE_FLOOR_CARRIED=1, src/native/build.ts), even where nvcc exists: the device's own
# compilers could fail -Werror or the SASS checks with a new warning or schedule, and nvcc there takes 40+ s.
# Every step runs under `timeout` and ends within DEADLINE_S, leaving 120 s of the call for estimates that
# prove wrong; a failed or timed-out step is logged and the rest runs, and each result is written out as its
# step ends. At most 8 files come back: device.log, verify.log, generate.log, sass.txt.gz and one .tgz per
# profile (its folder and its log; the PyTorch peer's two profiles share profile-torch.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
ENTRIES=(build verify generate profile)
MAX_TRANSFER_MIB=62 # of the device's 64 MiB: room for a profile or two added after packing
DEADLINE_S=300      # of the 420 s call
HOT_KERNELS='linear_matvec|ln_qkv|ln_linear_gelu|linear_residual|lm_head|attention_kernel|argmax_kernel|layernorm_kernel|persistent_step_kernel'
FIXTURE=test/fixtures/gpt2-tiny
GENERATE_MODES=(eager eager-native graph graph-pdl persistent uncached)

# The steps in the order they run: name | expected seconds on an H200 | timeout (s) | basis of the estimate.
# "here" is the 2-core development VM; a step starts only while its estimate is left before DEADLINE_S (a
# profile cut short writes nothing), under its timeout or what is left, whichever is less.
BUDGET='
unpack                |  5 |  30 | measured here: python3 lzma unpacks bun.xz (36.8 MB) in 2.1 s, the CUDA library (4.5 MB xz) in under 1 s and the CLIs (0.4 MB xz) in 0.3 s
build                 | 12 | 120 | measured here: the CPU library g++ build 10.2 s (one process), each carried library stamp check a Bun start (0.3 s); the timeout leaves nvcc (40+ s) room should a carried stamp be stale
sass                  | 10 |  30 | measured here: cuobjdump -sass of the library (5.5 MB, its fatbin compressed), the filter and gzip -9: 14-16 s
profile fused         | 30 |  90 | guess: Bun start 0.3 s and a pass over 124M seeded weights 0.75 s (measured here), the CUDA context and module load a few s, peaks and launch floor ~2 s, ~2000 timed and traced steps of 0.15-1 ms, uncached recomputes of up to 1023 tokens, the report ~1 s (a one-context --backend cpu profile took 4.9 s here)
generate eager        |  3 |  20 | guess: Bun start 0.3 s (measured), the CUDA context and module load ~2 s, 48 gpt2-tiny tokens well under 1 s (1-2 s on the emulator here)
generate eager-native |  3 |  20 | as generate eager
generate graph        |  3 |  20 | as generate eager, plus a graph capture
generate graph-pdl    |  3 |  20 | as generate graph
generate persistent   |  3 |  20 | as generate eager
generate uncached     |  3 |  20 | as generate eager (3 s on the emulator here)
bit-identity          |  1 |  10 | measured here: one Bun start reading generate.log, under 1 s
verify                | 40 | 150 | guess: the SASS checks, every kernel against its CPU twin, the fixtures of both families in the tree (gpt2-tiny, llama-tiny, qwen3-tiny; the shared ones are not on the device) in both plans and every mode, GPT-2 small and SmolLM2-135M against the CPU and in every mode (~10 s of it: seeded weights, 200 tokens per mode)
profile llama         | 50 | 120 | guess: seeded weights for 1.24B parameters ~7.5 s (124M took 0.75 s here) and their bf16 rounding, 2.5 GB uploaded, the CUDA context a few s, ~1500 timed and traced steps of 0.6-1 ms, a 1024-token prefill, the synthetic fill of 8192 positions, the uncached baseline at 8 and 1024, time to first token cold and warm at 1024 and 8192 (prefills of 8 k tokens, a 268 MB prefix file written and read)
profile unfused       | 20 |  60 | guess: the fused profile without the interventions
profile peers         | 30 |  90 | guess: python3 importing torch and transformers ~10 s, GPT-2 small written as a checkpoint ~2 s, the seed, static, graph and Hugging Face variants beside graph mode
sanitizer memcheck    | 12 |  40 | guess: compute-sanitizer instruments the library as it loads; gpt2-tiny, 4 tokens
sanitizer synccheck   | 12 |  40 | as sanitizer memcheck
profile compile       | 60 | 100 | guess: a cold torch.compile(mode="reduce-overhead") alone takes 30-90 s (the issue), plus the peer start and graph mode
'
declare -a STEPS=()
declare -A EXPECT=() LIMIT=() BASIS=() ELAPSED=() OUTCOME=()
trim() { local s=${1#"${1%%[![:space:]]*}"}; echo "${s%"${s##*[![:space:]]}"}"; }
while IFS='|' read -r name expect limit basis; do
  name=$(trim "$name")
  [[ $name ]] || continue
  STEPS+=("$name") EXPECT[$name]=$((expect)) LIMIT[$name]=$((limit)) BASIS[$name]=$(trim "$basis")
done <<<"$BUDGET"

pack() {
  set -e
  [[ -x node_modules/.bin/bun ]] || npm ci --no-audit --no-fund
  export PATH="$PWD/node_modules/.bin:$PATH"
  pack_bun
  ../shared/device/pack-bun.sh .device >/dev/null # unpack-bun.sh (it keeps a bun.xz of the same version)
  rm -rf .device/app .device/app.tar.xz .device/fixtures && mkdir -p .device/build
  # one chunk of the code the CLIs share (about half the size of four whole bundles), xz-compressed (0.4 MB where
  # the folder is 1.8): `run` unpacks it into build/, so the kit never carries both
  local bundle
  bundle=$(mktemp -d)
  bun build $(printf 'src/cli/%s.ts ' "${ENTRIES[@]}") --target=bun --splitting --outdir "$bundle/app"
  tar -C "$bundle" -cf - app | xz -T1 -9e > .device/app.tar.xz
  rm -rf "$bundle"
  # the GPU libraries built here travel with their stamps (the CPU library is built there: -march=native here
  # may not run on its processor)
  bun src/cli/build.ts cupti
  cp build/libgpt2_cupti.so build/libgpt2_cupti.so.stamp .device/build/
  pack_cuda
  transfer_fits
}

# The CUDA library without the PTX that only GPUs past sm_90 would use (4.5 MB xz-compressed rather than 6.7), as
# `run` builds it (DECODE_FLOOR_CUDA_PTX=0). It is built where the project's own is, so the project's (with its
# PTX) is kept aside and put back afterwards, and the last pack's is put there first: an unchanged source tree
# then builds nothing.
CUDA_FILES=(libgpt2_cuda.so libgpt2_cuda.so.stamp resource-usage.txt)
pack_cuda() {
  local kept f
  kept=$(mktemp -d)
  for f in "${CUDA_FILES[@]}"; do
    if [[ -f build/$f ]]; then cp -p "build/$f" "$kept/"; fi
  done
  trap 'put_back_cuda "$kept"' EXIT
  if [[ -f .device/build/libgpt2_cuda.so.xz && -f .device/build/libgpt2_cuda.so.stamp ]]; then
    xz -dc .device/build/libgpt2_cuda.so.xz > build/libgpt2_cuda.so
    cp .device/build/libgpt2_cuda.so.stamp .device/build/resource-usage.txt build/
  fi
  DECODE_FLOOR_CUDA_PTX=0 bun src/cli/build.ts cuda
  cp build/libgpt2_cuda.so.stamp build/resource-usage.txt .device/build/
  xz -T1 -9 -c build/libgpt2_cuda.so > .device/build/libgpt2_cuda.so.xz
  put_back_cuda "$kept"
  trap - EXIT
}

# Puts back the project's CUDA library files kept in $1 (where it had none, none).
put_back_cuda() {
  local f
  for f in "${CUDA_FILES[@]}"; do
    if [[ -f $1/$f ]]; then cp -p "$1/$f" "build/$f"; else rm -f "build/$f"; fi
  done
  rm -rf "$1"
}

# Bun xz-compressed with the x86 branch filter (36.8 MB where ../shared/device/pack-bun.sh's plain -9 gives 38.0; the
# device's python3 lzma reads either), once per Bun version.
pack_bun() {
  local bun version
  bun=$(readlink -f node_modules/bun/bin/bun.exe)
  version=$("$bun" --version)
  [[ -f .device/bun.xz && $(cat .device/bun.x86 2>/dev/null) == "$version" ]] && return
  mkdir -p .device
  echo "compressing Bun $version with the x86 filter (about 75 s on 2 cores)..." >&2
  xz -T2 --x86 --lzma2=preset=9e,dict=128MiB -c "$bun" > .device/bun.xz.tmp
  mv .device/bun.xz.tmp .device/bun.xz
  echo "$version" > .device/bun.version # pack-bun.sh's: it keeps a bun.xz of that version
  echo "$version" > .device/bun.x86       # ours: the Bun whose bun.xz has the x86 filter
}

# What a device call sends: the tracked files (as they are in the working tree), the untracked ones git does
# not ignore, and .device.
transfer_fits() {
  local tracked untracked carried
  # a tracked file deleted in the working tree does not travel: stat skips it
  tracked=$(git ls-files -z | { xargs -0 stat -c %s 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }')
  untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r stat -c %s | awk '{ s += $1 } END { print s + 0 }')
  carried=$(find .device -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
  mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
  local total=$((tracked + untracked + carried))
  echo "transfer: $(mib $total) MiB (at most ${MAX_TRANSFER_MIB}): tracked $(mib "$tracked") MiB, untracked $(mib "$untracked") MiB, .device $(mib "$carried") MiB"
  if ((total > MAX_TRANSFER_MIB * 1048576)); then
    echo "error: the device transfer is $(mib $total) MiB, over ${MAX_TRANSFER_MIB} MiB" >&2
    return 1
  fi
}

# A CUDA tool from $CUDA_HOME/bin, else PATH, else beside the project (../shared/cuda-binutils).
find_cuda_tool() {
  local tool=${CUDA_HOME}/bin/$1
  [[ -x $tool ]] || tool=$(command -v "$1") || tool=../shared/cuda-binutils/$1
  [[ -x $tool ]] && echo "$tool"
}

# CUPTI's library, whose folder the carried libgpt2_cupti.so (NEEDED libcupti.so.13, RUNPATH where it was
# built) finds on LD_LIBRARY_PATH: the shallowest libcupti.so* under $CUDA_HOME (links followed: installs put it beside the toolkit's
# libraries, under extras/CUPTI or targets/<arch>), else in python3's nvidia packages (PyTorch's wheels).
find_cupti() {
  local lib pkg
  lib=$(find -L "$CUDA_HOME" -name 'libcupti.so*' 2>/dev/null | awk -F/ '{ print NF "\t" $0 }' | sort -n | head -1 | cut -f2)
  if [[ -z $lib ]] && pkg=$(python3 -c 'import nvidia.cuda_cupti as m; print(m.__path__[0])' 2>/dev/null); then
    lib=$(find -L "$pkg" -name 'libcupti.so*' | sort | head -1)
  fi
  [[ $lib ]] && echo "$lib"
}

# The bundled CLIs into $APP (build/app, which the kit does not carry), with python3's lzma (xz may be missing there).
unpack_app() {
  rm -rf "$APP" && mkdir -p "$APP"
  python3 -c "
import os, sys, tarfile
with tarfile.open(sys.argv[1], 'r:xz') as archive:
    for member in archive.getmembers():
        if member.isfile():  # app/<name>.js: flat, so only its base name is used
            with open(os.path.join(sys.argv[2], os.path.basename(member.name)), 'wb') as out:
                out.write(archive.extractfile(member).read())
" .device/app.tar.xz "$APP"
}

# Bun, the bundled CLIs and the carried GPU libraries, unpacked with python3's lzma (xz may be missing there).
unpack() {
  source .device/unpack-bun.sh || return 1
  unpack_app || return 1
  mkdir -p build
  cp .device/build/libgpt2_cuda.so.stamp .device/build/libgpt2_cupti.so .device/build/libgpt2_cupti.so.stamp .device/build/resource-usage.txt build/
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    .device/build/libgpt2_cuda.so.xz build/libgpt2_cuda.so
  echo "Bun $(bun --version) in $(dirname "$(command -v bun)"); the carried CUDA and CUPTI libraries and their stamps in build/"
}

# Each target on its own, so one that fails leaves the others built; the CPU library first.
build_libraries() {
  local target failed=0
  for target in "$@"; do "$BUN" "$APP/build.$EXT" "$target" || failed=1; done
  return $failed
}

dump_sass() {
  local tool
  tool=$(find_cuda_tool cuobjdump) || { echo "no cuobjdump (\$CUDA_HOME/bin, PATH, ../shared/cuda-binutils)"; return 1; }
  echo "cuobjdump: $tool"
  "$tool" -sass build/libgpt2_cuda.so | awk -v re="$HOT_KERNELS" '/Function :/ { keep = ($0 ~ re) } keep' | gzip -9 > "$OUT/sass.txt.gz"
  echo "hot kernels' SASS: $(gzip -dc "$OUT/sass.txt.gz" | grep -c 'Function :') functions → sass.txt.gz"
}

# Every launch mode's generated ids against each other and, the prompt being the fixture's, against its
# expected greedy tokens (picoGPT in float64): one line, exit 1 when any differs or is missing.
BIT_IDENTITY_JS='
const { readFileSync } = require("node:fs");
const modes = process.env.GENERATE_MODES.split(" ");
const runs = new Map(readFileSync(process.env.GENERATE_LOG, "utf8").split("\n").filter((l) => l.startsWith("{"))
  .map((l) => JSON.parse(l)).map((g) => [g.cache === "off" ? "uncached" : g.mode, g]));
const want = JSON.parse(readFileSync(`${process.env.FIXTURE}/expected.json`, "utf8"));
const firstDiff = (a, b) => a.findIndex((t, i) => t !== b[i]);
const problems = modes.filter((m) => !runs.has(m)).map((m) => `no tokens from ${m} (its step failed)`);
const [refMode, ref] = [...runs][0] ?? [];
for (const [m, g] of runs) {
  const i = firstDiff(g.generated_ids, ref.generated_ids);
  if (i >= 0) problems.push(`${m} differs from ${refMode} from token ${i} (${g.generated_ids[i]} vs ${ref.generated_ids[i]})`);
}
let fixture = "";
if (ref && JSON.stringify(ref.prompt_ids) === JSON.stringify(want.prompt)) {
  const i = firstDiff(ref.generated_ids, want.generated);
  if (i >= 0) problems.push(`${refMode} differs from ${process.env.FIXTURE}/expected.json from token ${i} (${ref.generated_ids[i]} vs ${want.generated[i]})`);
  fixture = `, those of ${process.env.FIXTURE}/expected.json`;
}
if (problems.length) {
  console.log(`bit-identity: ${problems.join("; ")}`);
  process.exit(1);
}
console.log(`bit-identity: ${[...runs.keys()].join(", ")} generated the same ${ref.generated_ids.length} tokens${fixture}`);
'

# Lines for device.log and stdout, and for the step's own log when that is another file.
log() {
  local to=$1
  shift
  if [[ $to == "$DEVICE_LOG" ]]; then echo "$*" | tee -a "$DEVICE_LOG"; else echo "$*" | tee -a "$DEVICE_LOG" "$to"; fi
}

print_budget() {
  local name total=0
  echo "budget: step, expected s on an H200, timeout s, basis (deadline ${DEADLINE_S} s of the 420 s call)"
  for name in "${STEPS[@]}"; do
    printf '  %-22s %4d %4d  %s\n' "$name" "${EXPECT[$name]}" "${LIMIT[$name]}" "${BASIS[$name]}"
    total=$((total + EXPECT[$name]))
  done
  printf '  %-22s %4d s expected in all\n' "total" "$total"
}

print_elapsed() {
  local name total=0 spent=0
  echo "budget against elapsed: step, expected s, elapsed s, outcome"
  for name in "${STEPS[@]}"; do
    printf '  %-22s %4d %7s  %s\n' "$name" "${EXPECT[$name]}" "${ELAPSED[$name]:--}" "${OUTCOME[$name]:-not run}"
    total=$((total + EXPECT[$name])) spent=$((spent + ${ELAPSED[$name]:-0}))
  done
  printf '  %-22s %4d %7d\n' "total" "$total" "$spent"
}

# step NAME LOG COMMAND...: COMMAND under `timeout`, with what the budget and the deadline leave it.
step() {
  local name=$1 to=$2
  shift 2
  local at=$((SECONDS - START)) expect=${EXPECT[$name]:?not in BUDGET: $name}
  local left=$((DEADLINE_S * SLACK - at)) limit=$((LIMIT[$name] * SLACK))
  local t=$((left < limit ? left : limit))
  if ((left < expect)); then
    OUTCOME[$name]="skipped: ${left} s left"
    log "$to" "$name SKIPPED: ${left} s left before the $((DEADLINE_S * SLACK)) s deadline, under its estimate of ${expect} s"
    return
  fi
  log "$to" "== $name (at ${at} s, timeout ${t} s, expected ${expect} s)"
  local began=$SECONDS
  timeout -k 5 "$t" "$@" 2>&1 | tee -a "$to"
  local rc=${PIPESTATUS[0]}
  ELAPSED[$name]=$((SECONDS - began))
  if ((rc == 0)); then
    OUTCOME[$name]=ok
  elif ((rc == 124)); then
    OUTCOME[$name]="timed out"
    log "$to" "$name FAILED (exit $rc, timed out after ${t} s)"
  else
    OUTCOME[$name]="failed (exit $rc)"
    log "$to" "$name FAILED (exit $rc)"
  fi
  log "$to" "-- $name: ${ELAPSED[$name]} s (expected ${expect} s), ${OUTCOME[$name]}"
}

# A step the rehearsal leaves to the GPU, in its place in the order.
not_rehearsed() {
  local name=$1 to=$2
  log "$to" "== $name (at $((SECONDS - START)) s, expected ${EXPECT[$name]:?not in BUDGET: $name} s)"
  log "$to" "$name: not rehearsed ($3)"
  OUTCOME[$name]="not rehearsed"
}

# profile NAME FLAGS...: one .tgz comes back per profile (at most 8 files in all), packed as soon as it ends:
# its folder (when it finished) and its log, in profile-NAME.tgz or, with ARCHIVE set, added to ARCHIVE.tgz. Its
# model and sizes are PROFILE_SIZE's unless SIZE names another array.
profile() {
  local name=$1 dir=profile-$1 archive=${ARCHIVE:-profile-$1}
  local -n size=${SIZE:-PROFILE_SIZE}
  shift
  step "profile $name" "$OUT/$dir.log" "$BUN" "$APP/profile.$EXT" "${BACKEND[@]}" "$@" "${size[@]}" --out "$OUT/$dir"
  local files=("$dir.log")
  [[ -d $OUT/$dir ]] && files+=("$dir")
  if [[ -f $OUT/$archive.tgz ]]; then
    files+=($(tar -tzf "$OUT/$archive.tgz" | sed -n 's|^\([^/]*\)/\{0,1\}$|\1|p' | sort -u))
    tar -xzf "$OUT/$archive.tgz" -C "$OUT"
  fi
  tar -czf "$OUT/$archive.tgz" -C "$OUT" "${files[@]}" && rm -rf "${files[@]/#/$OUT/}"
}

run() {
  : "${OUT:?run this on the device machine, where \$OUT is set (or REHEARSE=1 OUT=dir here)}"
  mkdir -p "$OUT" # the device's exists; a rehearsal's may not
  START=$SECONDS DEVICE_LOG=$OUT/device.log
  # the carried CUDA library was built without PTX (pack): its stamp's flags are those
  export NO_COLOR=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} DECODE_FLOOR_ROOT=$PWD DECODE_FLOOR_CARRIED=1 DECODE_FLOOR_CUDA_PTX=0
  export OUT HOT_KERNELS
  export APP=build/app EXT=js BUN=bun
  BACKEND=(--backend cuda)
  # every profile's model (GPT-2 small's shapes, seeded) and sizes; Llama-3.2-1B's (bf16, the published graphs +
  # PDL and megakernel figures' model) to 8192 tokens of context
  PROFILE_SIZE=(--contexts 8,128,512,1023 --repeats 20 --warmup 5 --e2e-tokens 128)
  LLAMA_SIZE=(--preset llama-3.2-1b --dtypes bf16 --contexts 8,1024,8192 --prompt-cache 1024,8192 --repeats 20 --warmup 5
    --e2e-tokens 128)
  local rehearse=${REHEARSE:-} targets=(cpu cuda cupti)
  SLACK=1
  if [[ $rehearse ]]; then
    # here, on the CPU: the same steps through the emulator, small, with the bundled CLIs if packed; on 2 cores that
    # other work may share (a test suite beside it), every timeout and the deadline 4x the device's (cuobjdump alone
    # took 12 s quiet here, over 30 s beside a test suite)
    SLACK=4
    if [[ -f .device/app.tar.xz ]]; then unpack_app; else APP=src/cli EXT=ts; fi
    BUN=node_modules/.bin/bun BACKEND=(--backend emu) targets=(cpu emu)
    PROFILE_SIZE=(--model "$FIXTURE" --contexts 8 --repeats 2 --warmup 0 --e2e-tokens 2 --traced-steps 1)
    LLAMA_SIZE=(--model test/fixtures/llama-tiny --dtypes bf16 --contexts 8 --prompt-cache 64 --repeats 2 --warmup 0
      --e2e-tokens 2 --traced-steps 1)
  fi
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 || echo "no nvidia-smi"; } | tee "$DEVICE_LOG"
  date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$DEVICE_LOG"
  print_budget | tee -a "$DEVICE_LOG"
  export -f find_cuda_tool unpack unpack_app build_libraries dump_sass

  if [[ $rehearse ]]; then
    not_rehearsed unpack "$DEVICE_LOG" "Bun and the libraries are here"
  else
    step unpack "$DEVICE_LOG" bash -c unpack
    [[ ${OUTCOME[unpack]} == ok ]] && source .device/unpack-bun.sh # Bun on this shell's PATH too, unpacked by the step
  fi
  local cupti
  if cupti=$(find_cupti); then
    export LD_LIBRARY_PATH=$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log "$DEVICE_LOG" "cupti: $cupti (its folder first on LD_LIBRARY_PATH)"
  else
    log "$DEVICE_LOG" "cupti: no libcupti.so* under $CUDA_HOME or in python3's nvidia packages"
  fi
  log "$DEVICE_LOG" "bun: $(command -v "$BUN"); CLIs: $APP; CUDA_HOME: $CUDA_HOME"
  step build "$DEVICE_LOG" bash -c 'build_libraries "$@"' build "${targets[@]}"
  if [[ $rehearse && ! -f build/libgpt2_cuda.so ]]; then
    not_rehearsed sass "$DEVICE_LOG" "no CUDA library here"
  elif [[ $rehearse ]] && ! find_cuda_tool cuobjdump >/dev/null; then
    not_rehearsed sass "$DEVICE_LOG" "no cuobjdump here: \$CUDA_HOME/bin, PATH, ../shared/cuda-binutils"
  else
    step sass "$DEVICE_LOG" bash -c dump_sass
  fi

  # the fused plan in every launch mode, timing the interventions too: bf16 weights and cache, 4 sequences per step
  profile fused --mode all --plan fused --dtypes f32,bf16 --batches 1,4

  local expected prompt tokens mode
  expected=$("$BUN" -e "const e = require('./$FIXTURE/expected.json'); console.log(e.prompt.join(','), e.generated.length)")
  read -r prompt tokens <<<"$expected"
  for mode in "${GENERATE_MODES[@]}"; do
    local how=(--mode "$mode")
    [[ $mode == uncached ]] && how=(--cache off)
    step "generate $mode" "$OUT/generate.log" "$BUN" "$APP/generate.$EXT" "${BACKEND[@]}" --model "$FIXTURE" --prompt-ids "$prompt" \
      "${how[@]}" --max-new-tokens "$tokens" --json
  done
  step bit-identity "$DEVICE_LOG" env GENERATE_MODES="${GENERATE_MODES[*]}" GENERATE_LOG="$OUT/generate.log" FIXTURE="$FIXTURE" \
    "$BUN" -e "$BIT_IDENTITY_JS"

  if [[ $rehearse ]]; then
    not_rehearsed verify "$OUT/verify.log" "minutes on the emulator: bun run verify --backend emu runs it"
  else
    step verify "$OUT/verify.log" "$BUN" "$APP/verify.$EXT" --backend cuda
  fi
  SIZE=LLAMA_SIZE profile llama --mode all --plan fused
  profile unfused --mode all --plan unfused
  local sanitizer
  if [[ $rehearse ]]; then
    not_rehearsed "profile peers" "$DEVICE_LOG" "PyTorch's variants on the GPU"
    not_rehearsed "sanitizer memcheck" "$DEVICE_LOG" "compute-sanitizer needs the GPU"
    not_rehearsed "sanitizer synccheck" "$DEVICE_LOG" "compute-sanitizer needs the GPU"
    not_rehearsed "profile compile" "$DEVICE_LOG" "torch.compile on the GPU"
  else
    ARCHIVE=profile-torch profile peers --mode graph --plan fused --peers torch --torch-variants seed,static,graph,hf
    # the persistent step kernel (a grid barrier, blocks co-resident) under memcheck and synccheck
    sanitizer=$(find_cuda_tool compute-sanitizer) || sanitizer=""
    log "$DEVICE_LOG" "compute-sanitizer: ${sanitizer:-none (\$CUDA_HOME/bin, PATH, ../shared/cuda-binutils)}"
    for tool in memcheck synccheck; do
      [[ $sanitizer ]] || { OUTCOME["sanitizer $tool"]="no compute-sanitizer"; continue; }
      step "sanitizer $tool" "$DEVICE_LOG" "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 1 \
        "$BUN" "$APP/generate.$EXT" "${BACKEND[@]}" --model "$FIXTURE" --prompt-ids "$prompt" --mode persistent --max-new-tokens 4 --json
    done
    ARCHIVE=profile-torch profile compile --mode graph --plan fused --peers torch --torch-variants compile
  fi

  log "$DEVICE_LOG" "== done in $((SECONDS - START)) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
  # last, the short table: the card, failures, verify's verdict, bit-identity, then the budget against the time taken
  { grep -hE "FAILED|SKIPPED|^bit-identity|^NVIDIA |ERROR SUMMARY" "$DEVICE_LOG"; grep -h "^verify on" "$OUT/verify.log"; } 2>/dev/null | tail -n 30
  print_elapsed | tee -a "$DEVICE_LOG"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
