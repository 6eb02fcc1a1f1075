#!/bin/bash
# The CPU recipe's levers, one at a time, each from FULL-SENTENCES at 15,000 steps on the corpus fifth
# of cpu_ablations.py (whose FULL-SENTENCES row, the baseline here, probed at 44.1), each probed by
# `roberta probe` (its fixed recipe, 3 seeds). Runs one job at a time: two torch jobs on the 2-core
# machine slow each other several-fold. Resumable: a finished run resumes to nothing, a probe reads
# its cells back. The random init of a 2 x 128 run on the 8K corpus fifth is the same model as
# RANDOM_FROM's (same shape, tokenizer and seed), so its probe cells are copied; a run of another
# shape or tokenizer probes its own.
#
#   bash benchmarks/experiments/cpu_levers.sh WORK RANDOM_FROM
# WORK holds tok-8k/, corpus-8k/, corpus-fifth/ and fifth/ (see cpu_ablations.py); RANDOM_FROM is a
# probed 8K run (the 45,000-step recipe run r90). Results: WORK/levers/NAME/probe/probe.md.
set -euo pipefail
WORK=$(realpath "${1:?WORK directory}"); RANDOM_FROM=$(realpath "${2:?a probed 8K run}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
R="$ROOT/.venv/bin/roberta"; CFG="$ROOT/configs/pretrain-cpu-20min.toml"; GLUE="$ROOT/../shared/data/glue"
cd "$WORK" && mkdir -p levers

lever() {  # NAME CORPUS SAME_RANDOM_INIT(yes|no) [--section.key=value ...]
  local name=$1 corpus=$2 same=$3 run=levers/$1; shift 3
  local resume=(); [ -d "$run" ] && resume=(--resume)
  echo "$name: pretraining from $(date -u +%H:%M:%S)"
  "$R" pretrain --config "$CFG" --data "$corpus" --out "$run" --train.max_steps=15000 \
    --train.checkpoint_every=5000 --train.eval_every=5000 --train.keep_last=0 "${resume[@]}" "$@" \
    > "levers/$name.log" 2>&1
  if [ "$same" = yes ]; then
    PYTHONPATH="$ROOT/benchmarks/experiments" "$ROOT/.venv/bin/python" -c "import sys
from pathlib import Path
from cpu_ablations import reuse_random_init
reuse_random_init(Path(sys.argv[1]), Path(sys.argv[2]))" "$run" "$RANDOM_FROM"
  fi
  echo "$name: probing from $(date -u +%H:%M:%S)"
  "$R" probe "$run" --glue "$GLUE" --checkpoints last --seeds 3 --no-progress >> "levers/$name.log" 2>&1
  tail -n 2 "$run/probe/probe.md"
}

lever seq64 corpus-fifth yes --data.seq_len=64 --train.batch_size=16 --train.micro_batch_size=16
[ -d tok-32k ] || "$R" train-tokenizer "$ROOT/../shared/data/corpus" --out tok-32k --vocab-size 32768 \
  --min-frequency 2 --no-progress
[ -d corpus-fifth-32k ] || "$R" prepare fifth --tokenizer tok-32k --out corpus-fifth-32k
# a 32K vocabulary for the minutes of 15,000 steps of 8K (its head and embedding update cost 2.7x per step)
lever vocab32k corpus-fifth-32k no --train.max_steps=5600
lever mask15 corpus-fifth yes --data.mask_prob=0.15
lever lr3e-3 corpus-fifth yes --optim.lr=3e-3
lever epochs-1 corpus-8k no  # the whole corpus: 15.4M of its 20.3M tokens, under one epoch
lever seq32 corpus-fifth yes --data.seq_len=32 --train.batch_size=32 --train.micro_batch_size=32
# batch size: 16 sequences a step for half the steps (the same tokens), at the recipe's LR
lever batch16 corpus-fifth yes --train.batch_size=16 --train.micro_batch_size=16 --train.max_steps=7500
