#!/usr/bin/env bash
# The one prepared script for a lent GPU (an H200 here): the device has CUDA and Python but no Bun,
# Node.js or registry, so the CLIs travel bundled with Bun xz-compressed (../shared/device/pack-bun.sh).
#
#   here:    scripts/device-check.sh pack      # → .device/ (git-ignored): bun.xz, unpack-bun.sh, app/*.js, fixtures/gpt2-mini
#   device:  run(command="bash scripts/device-check.sh run", carry=[".device"], timeout_s=420)
#
# `run` builds the CUDA and CUPTI libraries, runs `verify` on the GPU, a short `generate` in each mode,
# then the full `profile`; everything lands in $OUT (at most 8 files): verify.log, generate.log,
# profile.log and the profile's summary.json, kernels.csv, trace.json, report.md, latency.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES=(build verify generate profile)

pack() {
  [[ -x node_modules/.bin/bun ]] || npm ci --no-audit --no-fund
  export PATH="$PWD/node_modules/.bin:$PATH"
  ../shared/device/pack-bun.sh .device
  rm -rf .device/app && mkdir -p .device/app .device/fixtures
  bun build $(printf 'src/cli/%s.ts ' "${ENTRIES[@]}") --target=bun --outdir .device/app
  rm -rf .device/fixtures/gpt2-mini && cp -r ../shared/fixtures/gpt2-mini .device/fixtures/ && chmod -R u+w .device/fixtures
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
  du -sh .device
}

run() {
  : "${OUT:?run this on the device machine, where \$OUT is set}"
  source .device/unpack-bun.sh
  export DECODE_FLOOR_ROOT="$PWD" GPT2_MINI="$PWD/.device/fixtures/gpt2-mini" NO_COLOR=1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/verify.log"
  date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$OUT/verify.log"
  bun .device/app/build.js cuda cupti cpu 2>&1 | tee -a "$OUT/verify.log"
  bun .device/app/verify.js --backend cuda 2>&1 | tee -a "$OUT/verify.log" || echo "verify FAILED" | tee -a "$OUT/verify.log"
  for mode in eager eager-native graph; do
    bun .device/app/generate.js --backend cuda --mode "$mode" --max-new-tokens 64 --json 2>&1 | tee -a "$OUT/generate.log"
  done
  bun .device/app/generate.js --backend cuda --cache off --max-new-tokens 64 --json 2>&1 | tee -a "$OUT/generate.log"
  bun .device/app/profile.js --backend cuda --mode all --out "$OUT/profile" 2>&1 | tee "$OUT/profile.log"
  mv "$OUT"/profile/{summary.json,kernels.csv,trace.json,report.md,latency.svg} "$OUT"/ && rm -rf "$OUT/profile"
  tail -n 30 "$OUT/verify.log"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
