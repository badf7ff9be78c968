#!/usr/bin/env bash
# GPU proof of the system checks (docs/gpu-proof.md): run `trainwiz check --json` on the H200
# machine and keep the output. The device machine has no Docker and no network, so
# docker/registry/hf checks fail there by design; what this proves is the NVML part: real driver,
# CUDA version, GPUs, compute capability, memory in use and its processes. Needs only pydantic,
# pyyaml, nvidia-ml-py, psutil, rich (present in the device's python3) plus the repo on
# PYTHONPATH: no trainwiz install.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TRAINWIZ_HOME="$OUT/trainwiz-home"
PY="${PYTHON:-python3}"
"$PY" -c 'import pydantic, yaml, pynvml, psutil, rich' || {
    echo "missing modules: carry wheels (pydantic, pydantic-core, annotated-types, typing-inspection) with --target onto PYTHONPATH" >&2
    exit 2
}
for preset in "" vicuna-7b-4xa100-40g vicuna-13b-v1.3-8xa100; do
    name="${preset:-no-preset}"
    args=(check --json)
    [ -n "$preset" ] && args+=(--preset "$preset")
    "$PY" -m tui.cli "${args[@]}" >"$OUT/check-$name.json" 2>"$OUT/check-$name.stderr"
    echo "$name: exit $?" | tee -a "$OUT/summary.txt"
done
"$PY" -m tui.cli check --only nvidia_driver --only gpus | tee "$OUT/check-table.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
"$PY" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
data = json.load(open(f"{out}/check-no-preset.json"))
by = {c["id"]: c for c in data["checks"]}
print("driver:", by["nvidia_driver"]["data"])
for gpu in by["gpus"]["data"].get("gpus", []):
    print(f"GPU {gpu['index']}: {gpu['name']} cc {gpu['compute_capability']} "
          f"{gpu['memory_total'] / 2**30:.1f} GiB, MIG {gpu['mig']}, {len(gpu['processes'])} procs")
PY
