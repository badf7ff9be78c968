#!/usr/bin/env bash
# One device call (~9.7 min: run it with timeout_s 595; one H100/H200) for docs/performance.md 2026-12-08: tune's own
# 6.74B LoRA pick probed with the entry's opt-in packed attention of this round (torch's
# FlashAttention-2 varlen, backend/entry/varlen.py, through the preset's launch.env), the same
# settings on flex_attention (row p8192) as the baseline on the same machine and data, and both
# on long documents. Returns 8 files at most:
# lora_tune.sh's five, lora-sweep.jsonl (both sweep rows), sweeps.tar.gz, and the caller's log.
# BASE_CONFIGS=none / LONG_CONFIGS=none skip the ShareGPT baseline / the long documents; LONG_CONFIGS names the long-document rows.
# Usage (repo root, .whl carried): set -o pipefail; OUT=dir bash benchmarks/device/lora_varlen.sh 2>&1 | tee $OUT/log.txt
set -uo pipefail
D=$(dirname "$0")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PACKED_ATTENTION=${PACKED_ATTENTION:-varlen} TOP=${TOP:-1} STEPS=${STEPS:-8} LAUNCH_STEPS=${LAUNCH_STEPS:-0} NCONV=1500 BUDGET=${TUNE_BUDGET:-250} \
  OUT=$OUT bash $D/lora_tune.sh
grep -h "attention\|varlen" /tmp/tw-lora-tune/runs/*/train.log 2>/dev/null | sort | uniq -c | head
rm -rf /tmp/sw; mkdir -p /tmp/sw
[ "${BASE_CONFIGS:-}" = none ] || CONFIGS="${BASE_CONFIGS:-p8192}" STEPS=10 MINLEFT=60 \
  BUDGET=${BASE_BUDGET:-120} OUT=/tmp/sw bash $D/lora_sweep.sh
[ "${LONG_CONFIGS:-}" = none ] || TAG=long MEDIAN=1600 SIGMA=0.5 CONFIGS="${LONG_CONFIGS:-p8192-varlen p8192}" \
  STEPS=10 MINLEFT=60 BUDGET=${LONG_BUDGET:-210} OUT=/tmp/sw bash $D/lora_sweep.sh
cat /tmp/sw/*.jsonl > $OUT/lora-sweep.jsonl 2>/dev/null
tar czf $OUT/sweeps.tar.gz -C /tmp sw 2>/dev/null
true
