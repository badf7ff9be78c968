#!/usr/bin/env bash
# Real-data benchmark on one H100 or H200 (docs/performance.md; --gpu from nvidia-smi). Usage (repo root, on the GPU machine):
#   OUT=dir benchmarks/device/perf.sh {3b|7b} [extra run names...]
# Makes ShareGPT-shaped data (benchmarks/make_conversations.py) and a random-weight Llama,
# measures the lengths (trainwiz data check), asks `trainwiz tune` for the configuration (host RAM
# read from this machine), launches it through `trainwiz launch`, then the extra rows
# (padded: FastChat's padding at b4 ga2; nolig: packed without Liger; ga4/ga8: the tuned rows with
# 4/8 rows per optimizer step, PSTEPS steps) while time is left.
set -uo pipefail
SHAPE=$1; shift
. "$(dirname "$0")/common.sh" /tmp/perf-$SHAPE 540
STEPS=${STEPS:-40}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU_NAME" in *H200*) GPU=h200 ;; *) GPU=h100 ;; esac  # tune's and plan's --gpu
( while true; do echo "$(( $(date +%s) - T0 )) $(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo)" >> $R/hostmem.log; sleep 1; done ) > /dev/null 2>&1 &
SAMPLER=$!; trap 'kill $SAMPLER 2>/dev/null' EXIT  # a live sampler would hold the pipe open
stamp "data + model $SHAPE"
python3 benchmarks/make_conversations.py /tmp/data.json --n ${NCONV:-1500} | tee -a $R/timeline.txt
[ -d /tmp/m$SHAPE ] || python3 benchmarks/perf_make_model.py $SHAPE /tmp/data.json /tmp/m$SHAPE > $R/make.txt 2>&1
stamp "data check"
python3 -m tui.cli data check /tmp/data.json --model /tmp/m$SHAPE --max-length 2048 --json > $R/lengths.json 2>$R/check.err
python3 -c "import json; t=json.load(open('$R/lengths.json'))['tokens']; print({k: t[k] for k in ('n','mean','p50','p90','p99','max','truncated_share','mismatched')})" | tee -a $R/timeline.txt
base() { cat > $R/base.yaml <<YAML
schema: 1
name: bench-$SHAPE
description: real-data benchmark base - the seed's training configuration on one GPU
model: {source: local, dir: /tmp/m$SHAPE}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: 1}
training:
  data_path: /tmp/data.json
  output_dir: "@run/output"
  bf16: true
  tf32: true
  max_steps: $STEPS
  per_device_train_batch_size: 1
  gradient_accumulation_steps: 8
  save_strategy: "no"
  learning_rate: 2.0e-5
  warmup_ratio: 0.03
  lr_scheduler_type: cosine
  logging_steps: 1
  fsdp: "full_shard auto_wrap offload"
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  model_max_length: 2048
  gradient_checkpointing: true
  report_to: none
  seed: 42
YAML
}
base
MEM=$(awk '/MemTotal/{printf "%.0f", $2/1048576}' /proc/meminfo)
stamp "tune --gpu $GPU (host RAM read: $MEM GiB; the device hosts have 128)"
if [ -n "${PROBE:-}" ]; then  # measured: the top PROBE candidates, OOM falls back to the next
  python3 -m tui.cli tune $R/base.yaml --gpu $GPU --lengths $R/lengths.json --host-ram 128 --probe --top $PROBE --steps ${PSTEPS_PROBE:-20} --write $R/tuned.yaml --force > $R/tune.txt 2>&1
else
  python3 -m tui.cli tune $R/base.yaml --gpu $GPU --lengths $R/lengths.json --host-ram 128 --write $R/tuned.yaml --force > $R/tune.txt 2>&1
fi
cat $R/tune.txt | head -12
python3 -m tui.cli plan $R/tuned.yaml --gpu $GPU --lengths $R/lengths.json --host-ram 128 --json > $R/plan-tuned.json 2>&1
variant() { # name sed-expr...
  local n=$1; shift; cp $R/tuned.yaml $R/$n.yaml
  for e in "$@"; do sed -i "$e" $R/$n.yaml; done
  sed -i "s/^name: .*/name: $n/" $R/$n.yaml
  python3 -m tui.cli plan $R/$n.yaml --gpu $GPU --lengths $R/lengths.json --host-ram 128 --json > $R/plan-$n.json 2>&1
}
run() { # name
  local n=$1
  stamp "launch $n"
  ( peak=0; while [ ! -f $R/$n.stop ]; do u=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo); [ $u -gt $peak ] && peak=$u; echo $peak > $R/$n.hostmem_kib; sleep 0.5; done ) > /dev/null 2>&1 &
  id=$(python3 -m tui.cli launch $R/$n.yaml --detach --no-prepare 2>>$R/launch.err)
  python3 -m tui.cli logs -f "$id" > /dev/null 2>&1
  touch $R/$n.stop; sleep 1
  d=$TRAINWIZ_HOME/runs/$id; mkdir -p $R/$n
  cp $d/metrics.jsonl $d/status.json $d/plan.json $d/preset.yaml $d/profile.json $d/profile-trace.json.gz $R/$n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log | tail -n 80 > $R/$n/train.log.tail
  rm -rf $d/output  # the 64 GB disk holds the models; the saved weights are not measured
  stamp "end $n: $(python3 -c "import json; print(json.load(open('$d/status.json'))['state'])")"
}
[ -n "${PROBE:-}" ] || run tuned
for extra in "$@"; do
  left=$(( BUDGET - $(date +%s) + T0 ))
  if [ $left -lt ${NEED:-150} ]; then stamp "skip $extra: ${left}s left"; continue; fi
  case $extra in
    paddedgc) variant paddedgc 's/^  packing: true/  packing: false/' '/pack_tokens/d' '/use_liger_kernel/d' 's/per_device_train_batch_size: .*/per_device_train_batch_size: 4/' 's/gradient_accumulation_steps: .*/gradient_accumulation_steps: 2/' 's/gradient_checkpointing: .*/gradient_checkpointing: true/' "s/max_steps: .*/max_steps: ${PSTEPS:-25}/" ;;
    padded) variant padded 's/^  packing: true/  packing: false/' '/pack_tokens/d' '/use_liger_kernel/d' 's/per_device_train_batch_size: .*/per_device_train_batch_size: 4/' 's/gradient_accumulation_steps: .*/gradient_accumulation_steps: 2/' "s/max_steps: .*/max_steps: ${PSTEPS:-25}/" ;;
    nolig) variant nolig '/use_liger_kernel/d' "s/max_steps: .*/max_steps: 20/" ;;
    gc) variant gc 's/gradient_checkpointing: .*/gradient_checkpointing: true/' "s/max_steps: .*/max_steps: 20/" ;;
    ga4) variant ga4 's/gradient_accumulation_steps: .*/gradient_accumulation_steps: 4/' "s/max_steps: .*/max_steps: ${PSTEPS:-20}/" ;;
    ga8) variant ga8 's/gradient_accumulation_steps: .*/gradient_accumulation_steps: 8/' "s/max_steps: .*/max_steps: ${PSTEPS:-20}/" ;;
    p16k) variant p16k 's/pack_tokens: .*/pack_tokens: 16384/' "s/max_steps: .*/max_steps: 20/" ;;
  esac
  run $extra
done
stamp done
for d in $TRAINWIZ_HOME/runs/*/; do  # every run, the probe's too
  n=runs/$(basename $d); mkdir -p $R/$n
  cp $d/metrics.jsonl $d/status.json $d/preset.yaml $R/$n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log | tail -n 60 > $R/$n/train.log.tail
done
cd /tmp && tar czf $OUT/perf-$SHAPE.tar.gz perf-$SHAPE && cp $R/timeline.txt $R/tune.txt $OUT/
