#!/usr/bin/env bash
# The refactoring safety net: tiny seeded runs of every trainer and mode, then the sha256 prefixes of each
# run's model.safetensors and privacy.json. Run it before and after a change that must not change what is
# trained (the same --seed and --noise-seed give byte-identical models) and compare the two listings.
# Usage, from the repository root: bash scripts/seeded_hashes.sh OUTDIR   (about 75 s on 2 cores)
set -euo pipefail
O=${1:?usage: bash scripts/seeded_hashes.sh OUTDIR}
D="$(pwd)/.venv/bin/dpaudit"
rm -rf "$O"; mkdir -p "$O"
export OMP_NUM_THREADS=1
$D inject --corpus builtin:assistant --corpus-size 400 --out "$O/data" --seed 0 --frequencies 1,2 --per-frequency 2 --holdout 2 >/dev/null
J="--trainer jax-bert --data $O/data --seed 0 --preset tiny --steps 4 --batch-size 16 --physical-batch 8 --max-length 16 --vocab-size 128 --noise-seed 7"
$D train $J --out "$O/jax-dp" --noise-multiplier 1.0 >/dev/null 2>&1
$D train $J --out "$O/jax-np" --non-private >/dev/null 2>&1
T="--data $O/data --seed 0 --preset tiny --epochs 1 --batch-size 64 --max-length 16 --vocab-size 128 --noise-seed 7"
for m in sgd dp-sgd edp-sgd; do
  for task in classify mlm; do
    extra=""; [ "$m" != sgd ] && extra="--noise-multiplier 1.0"
    [ "$m" = edp-sgd ] && extra="$extra --micro-batches 4"
    $D train --trainer edp-sgd $T --mode $m --task $task --out "$O/edp-$m-$task" $extra >/dev/null 2>&1
  done
done
for task in classify mlm; do
  $D train --trainer rgp $T --task $task --out "$O/rgp-$task" --noise-multiplier 1.0 >/dev/null 2>&1
done
cd "$O"
for d in */; do
  d=${d%/}; [ "$d" = data ] && continue
  echo "$d model $(sha256sum "$d/model/model.safetensors" | cut -c1-16) privacy $(sha256sum "$d/privacy.json" | cut -c1-16)"
done
