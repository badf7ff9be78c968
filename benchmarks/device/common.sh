# Shared preamble of the device benchmarks (perf.sh, tune_probe.sh): sourced, not run.
# On the GPU machine, from the repo root: keeps NVLink multicast off (KINDS.md), installs the
# carried wheels of .whl once into /tmp/site (transformers, fschat, liger-kernel: the image has
# none of these versions) and those of .whl-q when carried too (bitsandbytes for QLoRA, kept
# apart so that calls without QLoRA send less), puts them and this checkout on PYTHONPATH,
# and gives the caller
# R (its results folder, $1), T0, BUDGET (default $2) and stamp (a timeline line).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/transformers ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
fi
if ls .whl-q/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/bitsandbytes ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-q/*.whl || exit 3
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRAINWIZ_HOME=${TRAINWIZ_HOME:-/tmp/tw}
R=$1; mkdir -p "$R"; T0=$(date +%s); BUDGET=${BUDGET:-$2}
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/timeline.txt"; }
