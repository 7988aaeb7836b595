#!/bin/bash
# The same libraries as sweep.sh swapped into build/ (the stamp hashes the sources, so profile loads the file as
# it is) under one short study command, old and new in turn, twice.
# alternates the old and new libraries under the same short study command
export PATH=/work/main/node_modules/.bin:$PATH
cd /work/main
cp build/libgpt2_cpu.so /tmp/libs/project-built.so
for round in 1 2; do
  for lib in old new; do
    cp /tmp/libs/$lib.so build/libgpt2_cpu.so
    date -u
    bun run profile --backend cpu --preset ${PRESET:-llama-3.2-1b} --contexts 8191 --mode eager-native --prompt-cache off --e2e-tokens 8 --out /tmp/runs/ab-$lib-$round --force > /tmp/runs/ab-$lib-$round.log 2>&1
    echo "$lib $round: $(grep -o 'decode attention read.*' /tmp/runs/ab-$lib-$round/report.md)"
  done
done
cp /tmp/libs/project-built.so build/libgpt2_cpu.so
date -u
