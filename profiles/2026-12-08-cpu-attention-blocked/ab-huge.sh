#!/bin/bash
# With the new library, the cache allocated as the weights are (huge-page advice) where KV_HUGE is set: a
# temporary one-line change to allocateCache in src/run/model-buffers.ts (backend.alloc(bytes, "whole")), not kept.
export PATH=/work/main/node_modules/.bin:$PATH
cd /work/main
for preset in llama-3.2-1b smollm2-135m; do
for round in 1 2; do
  for huge in "" 1; do
    tag=$preset-h${huge:-0}-$round
    date -u
    KV_HUGE=$huge bun run profile --backend cpu --preset $preset --contexts 8191 --mode eager-native --prompt-cache off --e2e-tokens 8 --out /tmp/runs/hp-$tag --force > /tmp/runs/hp-$tag.log 2>&1
    echo "$tag: $(grep -o 'decode attention read.*' /tmp/runs/hp-$tag/report.md)"
  done
done
done
date -u
