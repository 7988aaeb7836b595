#!/usr/bin/env bash
# The one prepared script for a lent GPU (an H200 here): the device has CUDA and Python but no Bun,
# Node.js or registry, so the CLIs travel bundled with Bun xz-compressed (../shared/device/pack-bun.sh).
#
#   here:    scripts/device-check.sh pack      # → .device/ (git-ignored, at most 50 MiB): bun.xz, unpack-bun.sh,
#                                              #   app/*.js (the CLIs, their shared code in chunks), fixtures/gpt2-mini,
#                                              #   build/ (CUDA library xz-compressed + CUPTI library, built here)
#   device:  run(command="bash scripts/device-check.sh run", carry=[".device"], timeout_s=420)
#   here:    REHEARSE=1 OUT=/tmp/out scripts/device-check.sh run   # the same steps on the CPU emulator, gpt2-tiny
#
# `run` ends by itself within DEADLINE_S (290 s on an H200 by estimate, leaving a rerun inside the lease): every
# step runs under `timeout` with what is left of its budget, and a failed or timed-out step is logged and the
# rest still runs. Without nvcc there, the libraries built here are used when their sources stamp matches
# (src/native/build.ts). It builds, dumps the hot kernels' SASS, verifies (SASS checks, every kernel against the
# CPU twins, the model in both plans and every launch mode, the kernel model's predictions), generates in
# every mode, and profiles the fused plan (contexts 8, 128, 512, 1023; with the interventions: fp32 and bf16 weights
# and cache, 1 and 4 sequences per step), then graph mode beside the PyTorch peer
# (python3's torch on the GPU: seed-style eager, static cache + CUDA graph, torch.compile, Hugging Face), then the
# unfused plan, and last, with the time left, runs the persistent step kernel under compute-sanitizer (memcheck,
# synccheck). At most 8 files come back: device.log, verify.log, generate.log, profile.log, sass.txt.gz,
# profile-fused.tgz, profile-peers.tgz, profile-unfused.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
ENTRIES=(build verify generate profile)
MAX_CARRY_MIB=50
DEADLINE_S=${DEADLINE_S:-290}
HOT_KERNELS='linear_matvec|ln_qkv|ln_linear_gelu|linear_residual|lm_head|attention_kernel|argmax_kernel|layernorm_kernel|persistent_step_kernel'
CONTEXTS=8,128,512,1023
INTERVENTIONS="--dtypes f32,bf16 --batches 1,4"

pack() {
  set -e
  [[ -x node_modules/.bin/bun ]] || npm ci --no-audit --no-fund
  export PATH="$PWD/node_modules/.bin:$PATH"
  ../shared/device/pack-bun.sh .device
  rm -rf .device/app .device/build && mkdir -p .device/app .device/fixtures .device/build
  # one chunk of the code the CLIs share (about half the size of four whole bundles)
  bun build $(printf 'src/cli/%s.ts ' "${ENTRIES[@]}") --target=bun --splitting --outdir .device/app
  rm -rf .device/fixtures/gpt2-mini && cp -r ../shared/fixtures/gpt2-mini .device/fixtures/ && chmod -R u+w .device/fixtures
  # the GPU libraries built here travel with their stamps, for a device without nvcc (the CPU library is built
  # there: -march=native here may not run on its processor)
  bun src/cli/build.ts cuda cupti
  cp build/libgpt2_cuda.so.stamp build/libgpt2_cupti.so build/libgpt2_cupti.so.stamp build/resource-usage.txt .device/build/
  # every storage type x batch instantiation makes the CUDA library ~11 MB: it travels xz-compressed (~2 MB)
  xz -T1 -9 -c build/libgpt2_cuda.so > .device/build/libgpt2_cuda.so.xz
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
  local mib
  mib=$(du -sm .device | cut -f1)
  echo ".device: ${mib} MiB (at most ${MAX_CARRY_MIB})"
  (( mib <= MAX_CARRY_MIB )) || { echo "error: .device is ${mib} MiB, over ${MAX_CARRY_MIB}" >&2; exit 1; }
}

# The hot kernels' SASS, as the device's own cuobjdump reads the library there.
# A CUDA tool from $CUDA_HOME/bin, else PATH, else beside the project (../shared/cuda-binutils).
find_cuda_tool() {
  local tool=${CUDA_HOME}/bin/$1
  [[ -x $tool ]] || tool=$(command -v "$1") || tool=../shared/cuda-binutils/$1
  [[ -x $tool ]] && echo "$tool"
}
find_cuobjdump() { find_cuda_tool cuobjdump; }
dump_sass() {
  local tool
  tool=$(find_cuobjdump) || { echo "no cuobjdump (\$CUDA_HOME/bin, PATH, ../shared/cuda-binutils)"; return 1; }
  "$tool" -sass build/libgpt2_cuda.so | awk -v re="$HOT_KERNELS" '/Function :/ { keep = ($0 ~ re) } keep' | gzip -9 > "$OUT/sass.txt.gz"
  echo "hot kernels' SASS: $(gzip -dc "$OUT/sass.txt.gz" | grep -c 'Function :') functions → sass.txt.gz"
}

run() {
  : "${OUT:?run this on the device machine, where \$OUT is set (or REHEARSE=1 OUT=dir here)}"
  local start=$SECONDS
  # step NAME LOG BUDGET_S COMMAND...: COMMAND under `timeout`, its budget or what is left before the deadline
  step() {
    local name=$1 log=$2 budget=$3
    shift 3
    local left=$((DEADLINE_S - (SECONDS - start)))
    local t=$((left < budget ? left : budget))
    if ((t < 5)); then echo "$name SKIPPED: no time left before the ${DEADLINE_S} s deadline" | tee -a "$log"; return; fi
    echo "== $name (at $((SECONDS - start)) s, timeout ${t} s)" | tee -a "$log"
    timeout -k 5 "$t" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    ((rc == 0)) || echo "$name FAILED (exit $rc$( ((rc == 124)) && echo ", timed out after ${t} s"))" | tee -a "$log"
  }
  local log="$OUT/device.log" app=.device/app bun=bun
  export NO_COLOR=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  local backend=(--backend cuda) model=() prompt=() tokens=64 ext=js
  # name: what that profile adds to the sizes; the fused plan first, the peers then, the unfused plan last
  # the fused profile also times the interventions: bf16 weights and cache, and 4 sequences per step
  local profiles=("fused:--mode all --plan fused $INTERVENTIONS" "peers:--mode graph --plan fused --peers torch" "unfused:--mode all --plan unfused")
  local profile_sizes=(--contexts "$CONTEXTS" --repeats 20 --warmup 5 --e2e-tokens 128)
  if [[ ${REHEARSE:-} ]]; then
    # here, on the CPU: the same steps through the emulator on the smallest model (one profile), with the
    # bundled CLIs if packed
    [[ -f $app/verify.js ]] || app=src/cli ext=ts
    bun=node_modules/.bin/bun
    backend=(--backend emu) model=(--model test/fixtures/gpt2-tiny) prompt=(--prompt-ids 1,2,3) tokens=3
    profiles=("fused:--mode all --plan fused $INTERVENTIONS")
    profile_sizes=(--contexts 8 --repeats 2 --warmup 0 --e2e-tokens 2 --traced-steps 1)
  else
    source .device/unpack-bun.sh || return 1
    export DECODE_FLOOR_ROOT="$PWD" GPT2_MINI="$PWD/.device/fixtures/gpt2-mini"
  fi
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 || echo "no nvidia-smi"; } | tee "$log"
  date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$log"
  if ! command -v nvcc >/dev/null && [[ ! -x $CUDA_HOME/bin/nvcc ]]; then
    mkdir -p build && cp -n .device/build/* build/ 2>/dev/null
    cp .device/build/libgpt2_cuda.so.stamp build/ && python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
      .device/build/libgpt2_cuda.so.xz build/libgpt2_cuda.so
    echo "no nvcc here: the CUDA and CUPTI libraries built where this was packed, if their sources stamp matches" | tee -a "$log"
  fi
  if [[ ${REHEARSE:-} ]]; then
    step "build" "$log" 150 "$bun" "$app/build.$ext" emu cpu
  else
    step "build" "$log" 150 "$bun" "$app/build.$ext" cuda cupti cpu
  fi
  export -f find_cuda_tool find_cuobjdump dump_sass
  export HOT_KERNELS OUT CUDA_HOME
  if [[ ${REHEARSE:-} && -f build/libgpt2_cuda.so ]] && ! find_cuobjdump >/dev/null; then
    step "sass" "$log" 5 echo "sass: not rehearsed (no cuobjdump here: \$CUDA_HOME/bin, PATH, ../shared/cuda-binutils)"
  elif [[ -f build/libgpt2_cuda.so ]]; then
    step "sass" "$log" 30 bash -c dump_sass
  fi
  if [[ ${REHEARSE:-} ]]; then
    step "verify" "$OUT/verify.log" 5 echo "verify: not rehearsed (minutes on the emulator: bun run verify --backend emu runs it)"
  else
    step "verify" "$OUT/verify.log" 120 "$bun" "$app/verify.$ext" --backend cuda
  fi
  for mode in eager eager-native graph graph-pdl persistent; do
    step "generate $mode" "$OUT/generate.log" 20 "$bun" "$app/generate.$ext" "${backend[@]}" "${model[@]}" "${prompt[@]}" --mode "$mode" --max-new-tokens "$tokens" --json
  done
  step "generate uncached" "$OUT/generate.log" 20 "$bun" "$app/generate.$ext" "${backend[@]}" "${model[@]}" "${prompt[@]}" --cache off --max-new-tokens "$tokens" --json
  for p in "${profiles[@]}"; do
    local name=${p%%:*} budget=100
    [[ $name == unfused ]] && budget=60
    # shellcheck disable=SC2086 # the profile's own flags, split on purpose
    step "profile $name" "$OUT/profile.log" "$budget" "$bun" "$app/profile.$ext" "${backend[@]}" "${model[@]}" ${p#*:} \
      "${profile_sizes[@]}" --out "$OUT/profile-$name"
    # one file per profile comes back (at most 8 in all): the whole output folder, trace included
    [[ -d $OUT/profile-$name ]] && tar -czf "$OUT/profile-$name.tgz" -C "$OUT" "profile-$name" && rm -rf "${OUT:?}/profile-$name"
  done
  # last, with what time is left: the persistent step kernel (a grid barrier, blocks co-resident) under
  # compute-sanitizer's memcheck and synccheck
  if [[ ! ${REHEARSE:-} ]]; then
    local sanitizer
    sanitizer=$(find_cuda_tool compute-sanitizer) || sanitizer=""
    for tool in memcheck synccheck; do
      if [[ -z $sanitizer ]]; then echo "sanitizer $tool: no compute-sanitizer" | tee -a "$log"; continue; fi
      step "sanitizer $tool" "$log" 40 "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 1 \
        "$bun" "$app/generate.$ext" "${backend[@]}" --model "$GPT2_MINI" --prompt-ids 1,2,3 --mode persistent --max-new-tokens 4 --json
    done
  fi
  echo "== done in $((SECONDS - start)) s; files: $(cd "$OUT" && ls | tr '\n' ' ')" | tee -a "$log"
  # last, the short table: failures, verify's verdict, the predicted steps, the measured time per token
  grep -hE "FAILED|SKIPPED|^verify on|^NVIDIA H200 |^ +[0-9]+ +[0-9.]+ +[0-9.]+ " "$log" "$OUT"/verify.log "$OUT"/profile.log 2>/dev/null | tail -n 30
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
