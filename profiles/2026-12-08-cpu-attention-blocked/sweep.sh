#!/bin/bash
# old.so: cuda/ at ea83822 (groups' queries in registers); new.so: at 90d36d6 (blocked on AVX); both built as
# ab.cpp's header says. hot: one thread, one layer's rows in L2; cold: two threads, 16-60 layers from DRAM.
cd /tmp/ab
for cfg in "9 3 64 256" "32 8 64 96" "14 2 64 256" "15 5 64 256" "16 8 128 128" "32 4 64 128" "24 8 128 64" "32 8 128 64" "16 4 64 256"; do
  set -- $cfg
  echo "== hot $cfg"; LAYERS=2 ./ab /tmp/libs/old.so /tmp/libs/new.so $1 $2 $3 $4 1 40 | grep -E "^[AB]|max"
done
for cfg in "9 3 64 8191 60" "32 8 64 8191 16" "14 2 64 8191 60" "16 8 128 8191 16"; do
  set -- $cfg
  echo "== cold 2 threads $cfg"; LAYERS=$5 SMALLPAGES=1 ./ab /tmp/libs/old.so /tmp/libs/new.so $1 $2 $3 $4 2 12 | grep -E "^[AB]|max|plain"
done
