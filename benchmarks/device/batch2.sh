#!/usr/bin/env bash
# Device call 2 (nvidia-h200-x2): the 1-GPU calibration grid (docs/planner.md) with the NVML
# sampler's CPU cost measured while it trains (docs/monitor.md), then real provoked GPU failures
# for diagnosis (docs/diagnosis.md). Results packed into one tarball in $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/results; mkdir -p $R/sampler
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/timeline.txt; }
stamp "calibration 1gpu + sampler bench"
python3 benchmarks/nvml_sampler_bench.py --seconds 60 --interval 1 --out $R/sampler > $R/sampler.txt 2>&1 &
python3 benchmarks/calibrate_gpu.py --grid 1gpu --out $R/calib1 --budget-s ${CALIB_BUDGET:-430} > $R/calib1.txt 2>&1
wait
stamp "provoke GPU failures"
timeout 100 python3 benchmarks/diagnose_bench.py --provoke-gpu $R/provoked > $R/provoke.txt 2>&1
stamp "done"
tar czf $OUT/batch2.tgz -C /tmp results
