#!/usr/bin/env bash
# On one H200 (docs/lora.md): a random-weight 7B-shaped Llama (benchmarks/perf_make_model.py
# 7b) trained through `trainwiz launch` (host runner, trainwiz entry) with LoRA, QLoRA and DeepSpeed
# ZeRO-3 (+ CPU-Adam offload): vicuna-7b-lora-1x24g's recipe (r 8 on q/k/v/o, b1, recompute,
# FastChat padding to 2048) with accumulation 4 and a few dozen steps; `trainwiz plan`'s prediction
# of each beside it. Usage (repo root, device): OUT=dir bash benchmarks/device/methods7b.sh RUN...
# RUN: lora | qlora | zero3 | zero3off. The wheels of .whl (bitsandbytes, deepspeed built with
# DS_BUILD_OPS=0: its ops JIT-build here) are installed first. Outputs: $OUT/methods7b.tgz + rows.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRAINWIZ_HOME=/tmp/tw21
R=/tmp/m21; mkdir -p $R; T0=$(date +%s); BUDGET=${BUDGET:-560}
M=/tmp/m7b DATA=/tmp/data21.json
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/timeline.txt; }
stamp "data + model"
[ -f $DATA ] || python3 benchmarks/make_conversations.py $DATA --n ${NCONV:-400} | tee -a $R/timeline.txt
[ -f $M/config.json ] || python3 benchmarks/perf_make_model.py 7b $DATA $M > $R/make.txt 2>&1
[ -f $R/lengths.json ] || python3 -m tui.cli data check $DATA --model $M --max-length 2048 --json > $R/lengths.json 2>$R/check.err
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a $R/timeline.txt
python3 -c "import bitsandbytes as b; print('bitsandbytes', b.__version__)" 2>&1 | tail -1 | tee -a $R/timeline.txt
python3 -c "import deepspeed as d; print('deepspeed', d.__version__)" 2>&1 | tail -1 | tee -a $R/timeline.txt
gen() { # NAME METHOD STEPS LR ZERO(none|3|3off)
local n=$1 method=$2 steps=$3 lr=$4 zero=$5
cat > $R/$n.yaml <<YAML
schema: 1
name: $n
description: LoRA/QLoRA/ZeRO on one H200 - $n (vicuna-7b-lora-1x24g's recipe on the 7B shape)
model: {source: local, dir: $M}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: 1}
training:
  data_path: $DATA
  output_dir: "@run/output"
  bf16: true
  tf32: true
  max_steps: $steps
  per_device_train_batch_size: 1
  gradient_accumulation_steps: 4
  save_strategy: "no"
  learning_rate: $lr
  weight_decay: 0.0
  warmup_ratio: 0.03
  lr_scheduler_type: cosine
  logging_steps: 1
  model_max_length: 2048
  gradient_checkpointing: true
  lazy_preprocess: true
  report_to: none
  seed: 42
YAML
if [ $method != full ]; then printf '  method: %s\n  lora:\n    lora_r: 8\n    lora_alpha: 16\n    lora_dropout: 0.05\n    lora_target_modules: [q_proj, k_proj, v_proj, o_proj]\n' $method >> $R/$n.yaml; fi
case $zero in
  3) printf '  zero:\n    stage: 3\n' >> $R/$n.yaml ;;
  3off) printf '  zero:\n    stage: 3\n    offload_optimizer: true\n' >> $R/$n.yaml ;;
esac
python3 -m tui.cli plan $R/$n.yaml --gpu h200 --lengths $R/lengths.json --host-ram 128 --json > $R/plan-$n.json 2>&1
python3 -m tui.cli plan $R/$n.yaml --gpu h200 --lengths $R/lengths.json --host-ram 128 > $R/plan-$n.txt 2>&1
}
run() { # NAME LIMIT_S
  local n=$1 limit=$2
  stamp "launch $n"
  ( peak=0; while [ ! -f $R/$n.stop ]; do u=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo); [ $u -gt $peak ] && peak=$u; echo $peak > $R/$n.hostmem_kib; sleep 0.5; done ) > /dev/null 2>&1 &
  local sampler=$!
  id=$(python3 -m tui.cli launch $R/$n.yaml --detach --no-prepare 2>>$R/launch.err)
  timeout $limit python3 -m tui.cli logs -f "$id" > /dev/null 2>&1 || { stamp "stop $n (limit ${limit}s)"; python3 -m tui.cli stop "$id" > /dev/null 2>&1; }
  touch $R/$n.stop; wait $sampler 2>/dev/null
  d=$TRAINWIZ_HOME/runs/$id; mkdir -p $R/$n
  cp $d/metrics.jsonl $d/status.json $d/preset.yaml $R/$n/ 2>/dev/null; cp $d/deepspeed.json $R/$n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log | tail -n 120 > $R/$n/train.log.tail
  du -sh $d/output > $R/$n/output-size.txt 2>&1; rm -rf $d/output  # 64 GB disk
  stamp "end $n: $(python3 -c "import json; print(json.load(open('$d/status.json'))['state'])" 2>&1) host peak $(( $(cat $R/$n.hostmem_kib) / 1048576 )) GiB"
}
for name in "$@"; do
  left=$(( BUDGET - $(date +%s) + T0 ))
  case $name in
    lora) need=100; gen lora lora ${LSTEPS:-30} 2.0e-4 none ;;
    qlora) need=120; gen qlora qlora ${LSTEPS:-30} 2.0e-4 none ;;
    zero3) need=150; gen zero3 full ${ZSTEPS:-15} 2.0e-5 3 ;;
    zero3off) need=170; gen zero3off full ${OSTEPS:-8} 2.0e-5 3off ;;
  esac
  if [ $left -lt $need ]; then stamp "skip $name: ${left}s left"; continue; fi
  run $name $(( left - 15 ))
done
python3 benchmarks/device/methods_rows.py $R > $R/rows.txt 2>&1; cat $R/rows.txt
stamp done
cd /tmp && tar czf $OUT/methods7b-$(date +%s).tgz m21 && cp $R/rows.txt $R/timeline.txt $OUT/
