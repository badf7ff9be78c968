#!/usr/bin/env bash
# Hand-set LoRA/QLoRA configurations of the 6.74B Vicuna-7B-shaped model on one H100/H200,
# each through `trainwiz launch` for STEPS steps, each beside the planner's prediction of it
# (`trainwiz plan --json` with the data's measured lengths): which of tune's candidates (and
# which it lacked) are fast on the GPU, and how far the planner is off. One device call, < 9 min.
# Usage (repo root, on the GPU machine; .whl carried, and .whl-q for QLoRA's bitsandbytes):
#   set -o pipefail; OUT=dir [TAG=name] [STEPS=10] [SEED=31] [MEDIAN=700] [SIGMA=0.8] \
#       [CONFIGS="a b"] bash benchmarks/device/lora_sweep.sh 2>&1 | tee $OUT/log
# PROFILE=FIRST:COUNT profiles those steps of every row (TRAINWIZ_PROFILE_STEPS: the entry's
# stepprofile.py; 9:2 with 10 steps leaves the median of steps 4-10 to the unprofiled ones) and
# adds the kernel time by kind to each row's line. MINLEFT: seconds a row needs to start (75).
# benchmarks/device/ligerhook is put on PYTHONPATH: a row whose launch.env has
# TRAINWIZ_BENCH_LIGER=loss applies only Liger's fused linear cross-entropy.
# TAG names this data set's results (several calls of the script in one device call, one per
# length distribution, keep each other's files); the model is made once per machine.
# CONFIGS names rows of benchmarks/device/lora_configs.py (run in that order; a row that runs
# past the budget is not started; rows are launched past the plan's memory gate, since a row
# the planner wrongly refuses is what this measures). In $OUT: lora-sweep-TAG.jsonl (one line
# per row: settings, predicted and measured real tokens/s and peak GiB, first step),
# lora-sweep-TAG.tar.gz (presets, plans, lengths.json, timeline, train.log tails).
set -uo pipefail
TAG=${TAG:-sharegpt}
rm -rf /tmp/lora-sweep-$TAG /tmp/tw-lora-sweep
export TRAINWIZ_HOME=/tmp/tw-lora-sweep
. "$(dirname "$0")/common.sh" /tmp/lora-sweep-$TAG "${BUDGET:-540}"
export PYTHONPATH=$PWD/benchmarks/device/ligerhook:$PYTHONPATH
[ -n "${PROFILE:-}" ] && export TRAINWIZ_PROFILE_STEPS=$PROFILE
STEPS=${STEPS:-10}
SEED=${SEED:-31}
MEDIAN=${MEDIAN:-700}
SIGMA=${SIGMA:-0.8}
CONFIGS=${CONFIGS:-"p8192 p8192-d0 p16384-d0 qlora-p8192 p4096x2"}
DATA=/tmp/lora-sweep-data-$SEED-$MEDIAN-$SIGMA.json
M=/tmp/lora-tune-m7b
left() { echo $(( BUDGET - $(date +%s) + T0 )); }
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
  stamp "ending pid $pid, still on the GPU from an earlier call"; kill -9 "$pid" 2>/dev/null
done
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU_NAME" in *H200*) GPU=h200 ;; *) GPU=h100 ;; esac
stamp "gpu '${GPU_NAME:-none}' -> --gpu $GPU; configs: $CONFIGS; $STEPS steps each"
python3 -c "import torch, transformers, peft, importlib.util as u; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'liger', bool(u.find_spec('liger_kernel')), 'bitsandbytes', bool(u.find_spec('bitsandbytes')))" 2>&1 | tail -1 | tee -a $R/timeline.txt
python3 -c "import bitsandbytes as b; print('bitsandbytes', b.__version__)" 2>&1 | tail -1 | tee -a $R/timeline.txt
[ -s $DATA ] || timeout 60 python3 benchmarks/make_conversations.py $DATA --n ${NCONV:-1500} \
  --seed $SEED --median $MEDIAN --sigma $SIGMA | tee -a $R/timeline.txt
[ -s $M/config.json ] || timeout 240 python3 benchmarks/perf_make_model.py 7b $DATA $M > $R/make.txt 2>&1
stamp "model: $(tail -n 1 $R/make.txt 2>/dev/null)"
timeout 180 python3 -m tui.cli data check $DATA --model $M --max-length 2048 --json > $R/lengths.json 2> $R/check.err
python3 -c "import json; t=json.load(open('$R/lengths.json'))['tokens']; print('lengths', {k: t.get(k) for k in ('n','mean','p50','p90','p99','max','truncated_share')})" 2>&1 | tee -a $R/timeline.txt
for name in $CONFIGS; do
  if [ "$(left)" -lt "${MINLEFT:-75}" ]; then stamp "$name: not started ($(left) s left)"; continue; fi
  python3 benchmarks/device/lora_configs.py "$name" "$M" "$DATA" "$STEPS" > $R/$name.yaml || continue
  timeout 60 python3 -m tui.cli plan $R/$name.yaml --gpu $GPU --lengths $R/lengths.json --json \
    > $R/$name.plan.json 2> $R/$name.plan.err
  lim=$(( $(left) - 25 )); [ $lim -gt 170 ] && lim=170
  stamp "$name: launch (limit ${lim}s)"
  id=$(timeout 60 python3 -m tui.cli launch $R/$name.yaml --detach --no-prepare --ignore-plan 2>> $R/launch.err)
  if [ -z "$id" ]; then stamp "$name: no run id ($(tail -n 2 $R/launch.err | tr '\n' ' '))"; continue; fi
  timeout $lim python3 -m tui.cli logs -f "$id" > /dev/null 2>&1
  timeout 30 python3 -m tui.cli stop "$id" --timeout 10 > /dev/null 2>&1
  python3 benchmarks/device/lora_configs.py --summary "$name" "$R" "$TRAINWIZ_HOME/runs/$id" \
    "$GPU_NAME" | tee -a $R/lora-sweep.jsonl
  grep -v 'it/s\]$' $TRAINWIZ_HOME/runs/$id/train.log 2>/dev/null | tail -n 40 > $R/$name.train.tail
  cp $TRAINWIZ_HOME/runs/$id/profile.json $R/$name.profile.json 2>/dev/null
  rm -rf $TRAINWIZ_HOME/runs/$id/output
done
stamp done
if [ -n "${OUT:-}" ]; then
  cp $R/lora-sweep.jsonl $OUT/lora-sweep-$TAG.jsonl 2>/dev/null
  cd /tmp && tar czf $OUT/lora-sweep-$TAG.tar.gz lora-sweep-$TAG
fi
true
