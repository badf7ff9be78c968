#!/usr/bin/env bash
# One device call (nvidia-h200-x2): the GPU proofs of checks, model validation, launch, monitor
# and the 2-GPU half of the planner calibration with seed vs tuned (docs/gpu-proof.md), packed
# into one tarball in $OUT (the tool returns <= 8 files).
# Run from the repo root with the wheels of .whl carried (see docs/gpu-proof.md).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/results; mkdir -p $R
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/timeline.txt; }
stamp "check"
OUT=$R/check bash benchmarks/gpu_check.sh > $R/check.txt 2>&1
stamp "make + validate 1.3B"
OUT=$R/model python3 benchmarks/gpu_make_model.py --dir /tmp/llama-1b > $R/make_model.txt 2>&1
python3 -m tui.cli model validate /tmp/llama-1b --json > $R/validate_1b.json 2>&1
stamp "launch 1 and 2 GPUs + NVML probe"
export TRAINWIZ_HOME=/tmp/tw-launch
( MAX_STEPS=${MAX_STEPS:-30} OUT=$R/launch bash benchmarks/gpu_launch.sh all > $R/launch.txt 2>&1 ) &
LPID=$!
# the probe follows the first run's training process tree (its launcher pid from status.json)
for _ in $(seq 1 600); do
  st=$(ls -d $TRAINWIZ_HOME/runs/*/status.json 2>/dev/null | head -1)
  pid=$([ -n "$st" ] && python3 -c "import json,sys; print(json.load(open('$st')).get('pid') or '')" 2>/dev/null)
  [ -n "$pid" ] && break; sleep 0.5
done
python3 benchmarks/gpu_monitor_probe.py --pid "${pid:-0}" --seconds 150 --out $R/probe/nvml-probe.jsonl > $R/probe.txt 2>&1 &
PPID2=$!
wait $LPID; kill $PPID2 2>/dev/null; wait $PPID2 2>/dev/null
stamp "calibration 2gpu"
python3 benchmarks/calibrate_gpu.py --grid 2gpu --out $R/calib2 --budget-s $(( ${BUDGET_END:-560} - ($(date +%s) - T0) )) > $R/calib2.txt 2>&1
stamp "done"
tar czf $OUT/batch1.tgz -C /tmp results
ls -la $OUT
