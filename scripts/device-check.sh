#!/usr/bin/env bash
# The one prepared script for a lent GPU (an H200 here): the device has CUDA and Python but no Bun,
# Node.js or registry, so the CLIs travel bundled with Bun xz-compressed (../shared/device/pack-bun.sh).
#
#   here:    scripts/device-check.sh pack      # → .device/ (git-ignored): bun.xz, unpack-bun.sh, app/*.js, fixtures/gpt2-mini
#   device:  run(command="bash scripts/device-check.sh run", carry=[".device"], timeout_s=420)
#
# `run` builds the CUDA and CUPTI libraries, runs `verify` on the GPU, a short `generate` in each mode,
# then the full `profile` with the PyTorch peer beside the modes (python3's torch on the GPU: seed-style eager,
# static cache + CUDA graph, torch.compile, Hugging Face); everything lands in $OUT (at most 8 files): verify.log, generate.log,
# profile.log and the profile's summary.json, kernels.csv, trace.json.gz, report.md, latency.svg.
set -uo pipefail
cd "$(dirname "$0")/.."
ENTRIES=(build verify generate profile)

pack() {
  set -e
  [[ -x node_modules/.bin/bun ]] || npm ci --no-audit --no-fund
  export PATH="$PWD/node_modules/.bin:$PATH"
  ../shared/device/pack-bun.sh .device
  rm -rf .device/app && mkdir -p .device/app .device/fixtures
  bun build $(printf 'src/cli/%s.ts ' "${ENTRIES[@]}") --target=bun --outdir .device/app
  rm -rf .device/fixtures/gpt2-mini && cp -r ../shared/fixtures/gpt2-mini .device/fixtures/ && chmod -R u+w .device/fixtures
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
  du -sh .device
}

# Each step runs whatever the one before it did: a failure is logged and the rest still runs.
run() {
  : "${OUT:?run this on the device machine, where \$OUT is set}"
  source .device/unpack-bun.sh
  export DECODE_FLOOR_ROOT="$PWD" GPT2_MINI="$PWD/.device/fixtures/gpt2-mini" NO_COLOR=1
  local log="$OUT/verify.log" app=.device/app
  step() { local name=$1 file=$2; shift 2; "$@" 2>&1 | tee -a "$file" || echo "$name FAILED (exit ${PIPESTATUS[0]})" | tee -a "$file"; }
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$log" || true
  date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$log"
  step "build cuda" "$log" bun $app/build.js cuda
  step "build cupti+cpu" "$log" bun $app/build.js cupti cpu
  step verify "$log" bun $app/verify.js --backend cuda
  for mode in eager eager-native graph; do
    step "generate $mode" "$OUT/generate.log" bun $app/generate.js --backend cuda --mode "$mode" --max-new-tokens 64 --json
  done
  step "generate uncached" "$OUT/generate.log" bun $app/generate.js --backend cuda --cache off --max-new-tokens 64 --json
  step profile "$OUT/profile.log" bun $app/profile.js --backend cuda --mode all --peers torch --out "$OUT/profile"
  # at most 8 files come back: the three logs and five of the profile's (trace.json gzipped: Perfetto opens it)
  if [[ -d $OUT/profile ]]; then
    gzip -9 -f "$OUT/profile/trace.json" 2>/dev/null || true
    for f in summary.json kernels.csv trace.json.gz report.md latency.svg; do mv -f "$OUT/profile/$f" "$OUT/" 2>/dev/null || true; done
    rm -rf "$OUT/profile"
  fi
  grep -E "FAILED|PASS|FAIL|verify on" "$log" "$OUT"/*.log | tail -n 20 || true
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
