#!/usr/bin/env bash
# One device call (nvidia-h200): the FSDP resume proof (benchmarks/device/resume_fsdp.py),
# with the wheels of docs/gpu-proof.md carried in .whl. Outputs land in $OUT.
# VARIANTS=... (see resume_fsdp.py): one uninterrupted run, then each variant killed and resumed.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRAINWIZ_HOME=/tmp/tw-resume OUT_DIR=$OUT
mkdir -p $TRAINWIZ_HOME
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${LIMIT:-320} python3 benchmarks/device/resume_fsdp.py
