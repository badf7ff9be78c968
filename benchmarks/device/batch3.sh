#!/usr/bin/env bash
# Device call 3 (nvidia-h200-x2), seed vs tuned at the largest lent size: a 3.4B Llama (OpenLLaMA-3B
# shape) made on the spot, launched by trainwiz's host runner and entry on 2 H200s with (a) the
# seed's configuration and (b) the planner's tuned one; planner predictions, host RAM peak, and
# the monitor's NVML sampler following the run's own process tree (docs/monitor.md).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRAINWIZ_HOME=/tmp/tw
R=/tmp/results; mkdir -p $R/runs $R/probe
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/timeline.txt; }
stamp "make 3.4B"
M=$(python3 -c "import sys; sys.path.insert(0,'benchmarks'); from pathlib import Path; import calibrate_gpu as c; print(c.make_model('python3','3b',Path('/tmp/m')))" 2>$R/make.err | tail -1)
echo "model: $M"
write() { # name nproc batch fsdp gc steps
cat > $R/$1.yaml <<YAML
schema: 1
name: $1
description: seed vs tuned at 2 GPUs - $1
model: {source: local, dir: "$M"}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: $2, master_port: 29650}
training:
  data_path: "@sample"
  output_dir: "@run/output"
  bf16: true
  tf32: true
  max_steps: $6
  per_device_train_batch_size: $3
  gradient_accumulation_steps: 1
  save_strategy: "no"
  learning_rate: 2.0e-5
  weight_decay: 0.0
  warmup_ratio: 0.04
  lr_scheduler_type: cosine
  logging_steps: 1
  fsdp: "$4"
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  model_max_length: 2048
  gradient_checkpointing: $5
  lazy_preprocess: true
  report_to: none
YAML
}
write seed-3b-2gpu 2 1 "full_shard auto_wrap offload" true 5
write tuned-3b-2gpu 2 4 "full_shard auto_wrap" false 20
python3 -m tui.cli plan $R/seed-3b-2gpu.yaml --gpu h200 --tune > $R/plan-seed-tune.txt 2>&1
python3 -m tui.cli plan $R/tuned-3b-2gpu.yaml --gpu h200 > $R/plan-tuned.txt 2>&1
hostmem() { # peak host RAM in use (MemTotal - MemAvailable), sampled every 0.5 s
  peak=0; while [ ! -f $R/stop-mem ]; do
    u=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo); [ $u -gt $peak ] && peak=$u
    echo $peak > $R/$1.hostmem_kib; sleep 0.5; done; rm -f $R/stop-mem; }
for name in seed-3b-2gpu tuned-3b-2gpu; do
  stamp "launch $name"
  hostmem $name & HM=$!
  id=$(python3 -m tui.cli launch $R/$name.yaml --detach 2>>$R/launch.err)
  run=$TRAINWIZ_HOME/runs/$id
  if [ $name = tuned-3b-2gpu ]; then
    for _ in $(seq 1 240); do step=$(python3 -c "import json; s=json.load(open('$run/status.json')); print(s.get('step') or '', s.get('pid') or '', s.get('pgid') or '')" 2>/dev/null); set -- $step; [ "${1:-}" = train ] && [ -n "${2:-}" ] && break; sleep 0.5; done
    python3 benchmarks/gpu_monitor_probe.py --pid "${2:-0}" --seconds 90 --out $R/probe/nvml-probe-tuned.jsonl > $R/probe.txt 2>&1 &
    PR=$!
  fi
  python3 -m tui.cli logs -f $id > /dev/null 2>&1
  touch $R/stop-mem; wait $HM
  mkdir -p $R/runs/$name; cp $run/metrics.jsonl $run/status.json $R/runs/$name/ 2>/dev/null
  grep -v 'it/s\]$' $run/train.log | tail -80 > $R/runs/$name/train.log.tail
  stamp "$name: $(python3 -m tui.cli runs --json | python3 -c "import json,sys; print([r['state'] for r in json.load(sys.stdin) if r['run_id']=='$id'])" 2>&1)"
done
kill $PR 2>/dev/null; wait 2>/dev/null
stamp done
tar czf $OUT/batch3.tgz -C /tmp results
