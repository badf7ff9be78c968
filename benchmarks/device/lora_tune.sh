#!/usr/bin/env bash
# `trainwiz tune --probe` of the shipped LoRA preset on one H100/H200, then `trainwiz launch` of
# its pick (docs/performance.md "LoRA with packed rows"). One device call, ~6-8 min, under 9.
# Usage (repo root, on the GPU machine; the wheels of .whl carried: transformers, fschat,
# liger-kernel, ...):
#   set -o pipefail; OUT=dir [TOP=2] [STEPS=10] [LAUNCH_STEPS=30] [BUDGET=530] [METHOD=qlora] \
#       [PACKED_ATTENTION=varlen] \
#       bash benchmarks/device/lora_tune.sh 2>&1 | tee $OUT/log
# Makes held-out ShareGPT-like conversations (benchmarks/make_conversations.py, seed 31: no
# planner constant saw them; the planner's default shape, median 700 sigma 0.8) and a random
# 6.74B Llama in the Vicuna-7B shape (benchmarks/perf_make_model.py 7b), measures the lengths
# (trainwiz data check), writes vicuna-7b-lora-1x24g adapted to this GPU (host runner, the
# local model and data, no saves), asks tune for its prediction (--no-probe), then lets it
# measure its top TOP configurations STEPS steps each (--probe: packed LoRA rows, Liger, fused
# AdamW, regional compile are candidates; QLoRA is skipped with its reason where bitsandbytes
# is not installed) and launches the measured winner for LAUNCH_STEPS steps (0: no launch; the
# probe rows are then the measurement, each a `trainwiz launch` of tune's candidate). In $OUT:
# lora-tune.jsonl (one JSON line per probe row, the prediction, the launch's summary),
# tune.json, tune-predicted.txt, timeline.txt and lora-tune.tar.gz (presets, plans, lengths,
# metrics, status, train.log tails, the calibration file). Every phase has a timeout, so a hang
# still returns the files.
set -uo pipefail
rm -rf /tmp/lora-tune /tmp/tw-lora-tune  # a warm machine keeps the last call's files
export TRAINWIZ_HOME=/tmp/tw-lora-tune   # no calibration rows from an earlier call
. "$(dirname "$0")/common.sh" /tmp/lora-tune "${BUDGET:-530}"
TOP=${TOP:-2}
STEPS=${STEPS:-10}
LAUNCH_STEPS=${LAUNCH_STEPS:-30}
DATA=/tmp/lora-tune-data.json
M=/tmp/lora-tune-m7b
left() { echo $(( BUDGET - $(date +%s) + T0 )); }
line() { echo "$1" >> $R/lora-tune.jsonl; [ -n "${OUT:-}" ] && echo "$1" >> $OUT/lora-tune.jsonl; }

# A run of an earlier call may still hold the GPU (a probe's run outlives a killed tune).
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
  stamp "ending pid $pid, still on the GPU from an earlier call"; kill -9 "$pid" 2>/dev/null
done
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU_NAME" in *H200*) GPU=h200 ;; *) GPU=h100 ;; esac
HOST_GIB=$(awk '/MemTotal/ {printf "%d", $2 / 1048576}' /proc/meminfo)
stamp "gpu '${GPU_NAME:-none}' -> --gpu $GPU; host RAM ${HOST_GIB} GiB; top $TOP x $STEPS steps, launch $LAUNCH_STEPS"
python3 -c "import torch, transformers, peft, importlib.util as u; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'liger', bool(u.find_spec('liger_kernel')), 'flash_attn', bool(u.find_spec('flash_attn')), 'bitsandbytes', bool(u.find_spec('bitsandbytes')))" 2>&1 | tail -1 | tee -a $R/timeline.txt

stamp "data (seed 31)"
timeout 60 python3 benchmarks/make_conversations.py $DATA --n ${NCONV:-1500} --seed 31 | tee -a $R/timeline.txt
stamp "model 7b"
[ -s $M/config.json ] || timeout 240 python3 benchmarks/perf_make_model.py 7b $DATA $M > $R/make.txt 2>&1
tail -n 1 $R/make.txt 2>/dev/null | tee -a $R/timeline.txt
[ -s $M/config.json ] || { stamp "no model: $(tail -n 3 $R/make.txt | tr '\n' ' ')"; }
timeout 180 python3 -m tui.cli data check $DATA --model $M --max-length 2048 --json > $R/lengths.json 2> $R/check.err
python3 -c "import json; t=json.load(open('$R/lengths.json'))['tokens']; print('lengths', {k: t.get(k) for k in ('n','mean','p50','p90','p99','max','truncated_share')})" 2>&1 | tee -a $R/timeline.txt

# The shipped LoRA preset on this GPU: its training settings (b1 ga16, recompute, r 8 on
# q/k/v/o, LR 2e-4), the local model and data, the host runner, no saves.
python3 - "$R/base.yaml" "$M" "$DATA" <<'PY'
import os
import sys

import yaml

out, model, data = sys.argv[1:4]
with open("presets/vicuna-7b-lora-1x24g.yaml") as fh:
    preset = yaml.safe_load(fh)
preset["name"] = "lora-tune-7b"
preset["description"] = "vicuna-7b-lora-1x24g's training on one GPU (benchmarks/device/lora_tune.sh)"
preset["model"] = {"source": "local", "dir": model}
preset.pop("environment", None)
preset.pop("container", None)
preset["launch"] = {"runner": "host", "entry": "trainwiz", "device": "cuda", "nproc_per_node": 1}
if os.environ.get("PACKED_ATTENTION"):  # PACKED_ATTENTION=varlen: the entry's torch varlen opt-in
    preset["launch"]["env"] = {"TRAINWIZ_PACKED_ATTENTION": os.environ["PACKED_ATTENTION"]}
tr = preset["training"]
tr["method"] = os.environ.get("METHOD") or tr.get("method", "lora")  # METHOD=qlora: QLoRA's tune
for key in ("save_steps", "save_total_limit", "per_device_eval_batch_size"):
    tr.pop(key, None)
tr.update(data_path=data, output_dir="@run/output", save_strategy="no", report_to="none",
          seed=42)
with open(out, "w") as fh:
    yaml.safe_dump(preset, fh, sort_keys=False)
PY
COMMON="--gpu $GPU --lengths $R/lengths.json --host-ram $HOST_GIB"
timeout 60 python3 -m tui.cli plan $R/base.yaml $COMMON > $R/plan-base.txt 2>&1

stamp "tune --no-probe (the prediction)"
timeout 90 python3 -m tui.cli tune $R/base.yaml $COMMON --no-probe --write $R/tuned-predicted.yaml \
  --force > $R/tune-predicted.txt 2>&1
head -n 30 $R/tune-predicted.txt | tee -a $R/timeline.txt
lim=$(( $(left) - 170 )); [ $lim -gt 330 ] && lim=330
[ "$LAUNCH_STEPS" -eq 0 ] && lim=$(( $(left) - 25 ))  # the probe alone: tune's pick, measured
stamp "tune --probe --top $TOP --steps $STEPS (limit ${lim}s)"
timeout $lim python3 -m tui.cli tune $R/base.yaml $COMMON --probe --top $TOP --steps $STEPS \
  --write $R/tuned.yaml --force --json > $R/tune.json 2> $R/tune.err
stamp "tune rc=$?"
grep -E "probe|skipped|winner|not launched" $R/tune.err | tail -n 12 | tee -a $R/timeline.txt
python3 - "$R/tune.json" <<'PY' | while read -r l; do line "$l"; done
import json, sys

try:
    report = json.load(open(sys.argv[1]))
except Exception as exc:
    print(json.dumps({"kind": "tune", "error": f"no tune report ({type(exc).__name__})"}))
    sys.exit(0)
for row in report.get("probe", []):
    print(json.dumps({"kind": "probe", **{k: row.get(k) for k in (
        "label", "source", "state", "skipped", "predicted_real_tokens_per_s",
        "measured_real_tokens_per_s", "predicted_peak_gib", "measured_peak_gib", "startup_s",
        "steps", "oom", "run_id")}}))
print(json.dumps({"kind": "tune", "winner": report.get("winner"), "batch": report.get("batch"),
                  "methods": report.get("methods"), "probed": report.get("probed")}))
PY

for d in $TRAINWIZ_HOME/runs/*/; do  # a probe cut by the limit above outlives its tune: stop it
  [ -d "$d" ] && timeout 40 python3 -m tui.cli stop "$(basename $d)" --timeout 10 > /dev/null 2>&1
done
if [ "$LAUNCH_STEPS" -gt 0 ]; then
PICK=$R/tuned.yaml
[ -s $PICK ] || { PICK=$R/tuned-predicted.yaml; stamp "no probe winner written: launching the predicted pick"; }
python3 - "$PICK" "$R/run.yaml" "$LAUNCH_STEPS" <<'PY'
import sys

import yaml

src, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src) as fh:
    preset = yaml.safe_load(fh)
preset["name"] = "lora-tune-7b-pick"
preset["training"]["max_steps"] = steps
with open(out, "w") as fh:
    yaml.safe_dump(preset, fh, sort_keys=False)
PY
timeout 60 python3 -m tui.cli plan $R/run.yaml $COMMON --json > $R/plan-run.json 2> $R/plan-run.err
timeout 60 python3 -m tui.cli plan $R/run.yaml $COMMON > $R/plan-run.txt 2>&1
lim=$(( $(left) - 30 ))
stamp "launch the pick for $LAUNCH_STEPS steps (limit ${lim}s)"
id=$(timeout 90 python3 -m tui.cli launch $R/run.yaml --detach --no-prepare 2>> $R/launch.err)
echo "$id" > $R/run_id
if [ -n "$id" ]; then
  timeout $(( lim - 10 )) python3 -m tui.cli logs -f "$id" > /dev/null 2>&1
  d=$TRAINWIZ_HOME/runs/$id
  if python3 -c "import json,sys; sys.exit(json.load(open('$d/status.json'))['state'] not in ('running','starting'))" 2>/dev/null; then
    stamp "stop the pick: past its limit"
    timeout 30 python3 -m tui.cli stop "$id" --timeout 10 > /dev/null 2>&1
  fi
else
  stamp "launch: no run id ($(tail -n 3 $R/launch.err | tr '\n' ' '))"
fi
python3 - "$R" "$TRAINWIZ_HOME/runs/${id:-none}" "$GPU_NAME" <<'PY' | while read -r l; do line "$l"; done
import json, statistics, sys

R, run, gpu_name = sys.argv[1:4]


def load(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except Exception:
        return default


lines = []
try:
    with open(f"{run}/metrics.jsonl") as fh:
        lines = [json.loads(x) for x in fh if x.strip()]
except OSError:
    pass
start = next((x for x in lines if x.get("kind") == "start"), {})
steps = [x for x in lines if x.get("kind") == "step"]
end = next((x for x in lines if x.get("kind") == "end"), {})
warm = [s for s in steps if s.get("step", 0) >= 4] or steps  # step 1 compiles
est = (load(f"{R}/plan-run.json", {}) or {}).get("estimate") or {}
thr, mem = est.get("throughput") or {}, est.get("memory") or {}


def med(key):
    vals = [s[key] for s in warm if s.get(key) is not None]
    return round(statistics.median(vals), 1) if vals else None


import yaml  # noqa: E402

tr = yaml.safe_load(open(f"{R}/run.yaml"))["training"]
print(json.dumps({
    "kind": "launch", "device": gpu_name, "run": run.rsplit("/", 1)[-1],
    "state": (load(f"{run}/status.json", {}) or {}).get("state"),
    "settings": {k: tr.get(k) for k in ("method", "packing", "pack_tokens",
                 "per_device_train_batch_size", "gradient_accumulation_steps",
                 "gradient_checkpointing", "recompute_layers", "use_liger_kernel", "optim",
                 "compile_layers", "max_steps")},
    "entry": {k: start.get(k) for k in ("attn_implementation", "use_liger_kernel", "optim",
              "compile_layers", "recompute_layers", "packing", "method", "trainable_params")},
    "predicted_real_tokens_per_s": thr.get("real_tokens_per_s"),
    "predicted_peak_allocated_gib": round(mem["peak_allocated"] / 2**30, 2) if mem.get("peak_allocated") else None,
    "measured_real_tokens_per_s": med("tokens_nonpad_per_s"),
    "measured_tokens_per_s": med("tokens_per_s"),
    "real_mfu": med("mfu_nonpad"),
    "steps": len(steps), "steps_in_median": len(warm),
    "first_step_s": steps[0].get("step_time_s") if steps else None,
    "peak_mem_gib": max((max(s["peak_mem_gib"]) for s in steps if s.get("peak_mem_gib")), default=None),
    "loss_first_last": [steps[0].get("loss"), steps[-1].get("loss")] if steps else None,
    "end_ok": end.get("ok"), "end_error": (end.get("error") or "")[:200] or None,
}))
PY

fi
stamp "files"
for d in $TRAINWIZ_HOME/runs/*/; do  # every probe run and the launch: metrics, status, preset, log tail
  [ -d "$d" ] || continue
  n=$R/runs/$(basename $d); mkdir -p $n
  cp $d/metrics.jsonl $d/status.json $d/preset.yaml $n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log 2>/dev/null | tail -n 60 > $n/train.log.tail
  rm -rf $d/output
done
cp $TRAINWIZ_HOME/calibration/*.jsonl $R/ 2>/dev/null
stamp done
if [ -n "${OUT:-}" ]; then
  cp $R/timeline.txt $R/tune-predicted.txt $R/tune.json $OUT/ 2>/dev/null
  cd /tmp && tar czf $OUT/lora-tune.tar.gz lora-tune
fi
true
