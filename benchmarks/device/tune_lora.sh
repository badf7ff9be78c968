#!/usr/bin/env bash
# `trainwiz tune` measuring its LoRA candidates on one H200 (docs/performance.md "LoRA tune on
# the H200"). Usage (repo root, on the GPU machine; the wheels of .whl carried):
#   OUT=dir [TOP=3] [STEPS=10] [BUDGET=540] [CALIB_IN=earlier-calibration.jsonl] \
#       benchmarks/device/tune_lora.sh [7b|3b]
# Data: ShareGPT-like conversations of a seed no planner constant was fitted on; base: the
# shipped LoRA preset's settings (b1 ga16, recompute on, r8 on q/k/v/o) on one GPU; then plain
# `trainwiz tune BASE --gpu h200 --lengths L --host-ram 128`, which probes on this machine: the
# top candidates run STEPS steps each through trainwiz launch and the measured fastest wins;
# every measurement goes to TRAINWIZ_HOME/calibration/nvidia-h200.jsonl under "method": "lora".
set -uo pipefail
SHAPE=${1:-7b}
. "$(dirname "$0")/common.sh" /tmp/tune-lora-$SHAPE 540
[ -n "${CALIB_IN:-}" ] && [ -f "$CALIB_IN" ] && mkdir -p $TRAINWIZ_HOME/calibration && cp "$CALIB_IN" $TRAINWIZ_HOME/calibration/nvidia-h200.jsonl
stamp "data"
python3 benchmarks/make_conversations.py /tmp/d-lora.json --n 600 --median 760 --sigma 0.85 --seed 21 | tee -a $R/timeline.txt
stamp "model $SHAPE"
[ -d /tmp/m$SHAPE ] || python3 benchmarks/perf_make_model.py $SHAPE /tmp/d-lora.json /tmp/m$SHAPE > $R/make.txt 2>&1
python3 -m tui.cli data check /tmp/d-lora.json --model /tmp/m$SHAPE --max-length 2048 --json > $R/lengths.json 2>$R/check.err
python3 -c "import json; t=json.load(open('$R/lengths.json'))['tokens']; print('lengths', {k: t[k] for k in ('n','mean','p50','p90','p99','max','truncated_share')})" | tee -a $R/timeline.txt
cat > $R/base.yaml <<YAML
schema: 1
name: tune-lora-$SHAPE
description: the shipped LoRA preset's training settings on one H200
model: {source: local, dir: /tmp/m$SHAPE}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: 1}
training:
  data_path: /tmp/d-lora.json
  output_dir: "@run/output"
  bf16: true
  tf32: true
  num_train_epochs: 3
  per_device_train_batch_size: 1
  gradient_accumulation_steps: 16
  save_strategy: "no"
  learning_rate: 2.0e-4
  warmup_ratio: 0.03
  lr_scheduler_type: cosine
  logging_steps: 1
  model_max_length: 2048
  gradient_checkpointing: true
  report_to: none
  seed: 42
  method: lora
  lora: {lora_r: 8, lora_alpha: 16, lora_dropout: 0.05, lora_target_modules: [q_proj, k_proj, v_proj, o_proj]}
YAML
python3 -m tui.cli plan $R/base.yaml --gpu h200 --lengths $R/lengths.json --host-ram 128 > $R/plan-base.txt 2>&1
left=$(( BUDGET - $(date +%s) + T0 ))
stamp "tune (top ${TOP:-3}, ${left}s left)"
timeout $(( left - 15 )) python3 -m tui.cli tune $R/base.yaml --gpu h200 --lengths $R/lengths.json --host-ram 128 --top ${TOP:-3} --steps ${STEPS:-10} --write $R/tuned.yaml > $R/tune.txt 2>$R/tune.err
stamp "tune rc=$?"
grep -E "probe|winner|optimizer step|predicted only|note: |tune:" $R/tune.txt | head -20 | tee -a $R/timeline.txt
cp $TRAINWIZ_HOME/calibration/*.jsonl $R/ 2>/dev/null
for d in $TRAINWIZ_HOME/runs/*/; do  # every probe run: metrics, status, preset, the log's tail
  n=runs/$(basename $d); mkdir -p $R/$n
  cp $d/metrics.jsonl $d/status.json $d/preset.yaml $R/$n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log | tail -n 40 > $R/$n/train.log.tail
done
stamp done
cd /tmp && tar czf $OUT/tune-lora-$SHAPE.tar.gz tune-lora-$SHAPE && cp $R/timeline.txt $OUT/timeline-lora-$SHAPE.txt; cp $R/tune.txt $OUT/tune-lora-$SHAPE.txt 2>/dev/null; true
