#!/usr/bin/env bash
# Today's chat-model families on one GPU (docs/performance.md, "Today's families on the GPU").
# Usage (repo root, on the GPU machine, the wheels of docs/performance.md in .whl/):
#   set -o pipefail; OUT=dir BUDGET=540 bash benchmarks/device/families.sh [qwen3b] [llama3b] 2>&1 | tee $OUT/log
# Makes ShareGPT-shaped data (benchmarks/make_conversations.py) and, per shape, a random-weight
# model of the real family shape with that family's tokenizer and chat template
# (benchmarks/family_make_model.py: Qwen2.5-3B, vocab 151,936; Llama-3.2-3B, vocab 128,256),
# measures the lengths under the run's template (trainwiz data check: template, unmaskable),
# asks `trainwiz tune --no-probe` for the predicted configuration on this GPU (h100 or h200, read
# from nvidia-smi),
# takes `trainwiz plan --json` of the tuned preset (the prediction), launches it through
# `trainwiz launch`, and writes into $OUT: SHAPE-summary.json (predicted vs measured; then
# SHAPE-nolig-summary.json, the same without Liger, while time is left), all-summaries.json
# and families.tar.gz (presets, plans, lengths, metrics, train.log tails, timeline).
# Every phase has a timeout, so a hang still returns the files. Local CPU check of the pipeline:
#   TW_DEVICE=cpu MAXLEN=256 STEPS=2 FAMILY_TINY=1 OUT=/tmp/o bash benchmarks/device/families.sh
set -uo pipefail
rm -rf /tmp/fam-results  # a warm machine keeps the last call's files
. "$(dirname "$0")/common.sh" /tmp/fam-results "${BUDGET:-540}"
MODELS=${*:-qwen3b llama3b}
STEPS=${STEPS:-30}
MAXLEN=${MAXLEN:-2048}
TW_DEVICE=${TW_DEVICE:-cuda}
DATA=/tmp/fam-data.json
left() { echo $(( BUDGET - $(date +%s) + T0 )); }

# A warm machine may still run this script's earlier runs (a tune probe's run outlives a killed
# tune): stop them, then end what still holds the GPU (only this session's processes run here).
for d in $TRAINWIZ_HOME/runs/*/; do
  [ -d "$d" ] && timeout 60 python3 -m tui.cli stop "$(basename $d)" --timeout 5 > /dev/null 2>&1
done
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
  stamp "ending pid $pid, still on the GPU from an earlier call"; kill -9 "$pid" 2>/dev/null
done
sleep 1; stamp "GPU memory used: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null)"

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU_NAME" in *H200*) GPU=h200 ;; *) GPU=h100 ;; esac
echo "${GPU_NAME:-no GPU}" > $R/gpu_name.txt
stamp "gpu: '${GPU_NAME:-none}' -> tune/plan --gpu $GPU; models: $MODELS; steps $STEPS"

stamp "data"
timeout 60 python3 benchmarks/make_conversations.py $DATA --n ${NCONV:-1500} | tee -a $R/timeline.txt

stamp "models (in parallel)"
for m in $MODELS; do
  rm -rf /tmp/fam-m$m
  timeout 240 python3 benchmarks/family_make_model.py $m $DATA /tmp/fam-m$m > $R/$m-make.txt 2>&1 &
done
wait
for m in $MODELS; do tail -n 1 $R/$m-make.txt | tee -a $R/timeline.txt; done

stamp "data check (in parallel)"
for m in $MODELS; do
  timeout 180 python3 -m tui.cli data check $DATA --model /tmp/fam-m$m --max-length $MAXLEN \
    --json > $R/$m-lengths.json 2> $R/$m-check.err &
done
wait
for m in $MODELS; do
  python3 -c "import json; t=json.load(open('$R/$m-lengths.json'))['tokens']; print('$m', {k: t.get(k) for k in ('chat_template','chat_template_reason','unmaskable','n','mean','p50','p90','p99','max','truncated_share','mismatched')})" 2>&1 | tee -a $R/timeline.txt
done

base() { # shape
  cat > $R/$1-base.yaml <<YAML
schema: 1
name: fam-$1
description: today's family benchmark base - one GPU, the model's own chat template
model: {source: local, dir: /tmp/fam-m$1}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: 1}
training:
  data_path: $DATA
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
  model_max_length: $MAXLEN
  gradient_checkpointing: true
  chat_template: auto
  report_to: none
  seed: 42
YAML
}

runcopy() { # preset run-copy: what launches (TW_DEVICE=cpu: the local check of the pipeline)
  cp "$1" "$2"
  if [ "$TW_DEVICE" = cpu ]; then
    sed -i -e 's/device: cuda/device: cpu/' -e 's/^  bf16: true/  bf16: false/' -e 's/^  tf32: true/  tf32: false/' "$2"
  fi
}

launch_run() { # shape preset-name limit_s
  local m=$1 n=$2 lim=$3 id d
  stamp "launch $n (limit ${lim}s)"
  id=$(timeout 90 python3 -m tui.cli launch $R/$n.yaml --detach --no-prepare 2>>$R/$m-launch.err)
  echo "$id" > $R/$n.run_id
  [ -n "$id" ] || { stamp "launch $n: no run id ($(tail -n 3 $R/$m-launch.err | tr '\n' ' '))"; return 1; }
  timeout $lim python3 -m tui.cli logs -f "$id" > /dev/null 2>&1
  d=$TRAINWIZ_HOME/runs/$id
  if python3 -c "import json,sys; sys.exit(json.load(open('$d/status.json'))['state'] not in ('running','starting'))" 2>/dev/null; then
    stamp "stop $n: past its ${lim}s"
    timeout 45 python3 -m tui.cli stop "$id" --timeout 10 > /dev/null 2>&1
  fi
  mkdir -p $R/$n
  cp $d/metrics.jsonl $d/status.json $d/plan.json $d/preset.yaml $R/$n/ 2>/dev/null
  grep -v 'it/s\]$' $d/train.log | tail -n 80 > $R/$n/train.log.tail
  rm -rf $d/output  # the saved weights are not measured; the disk holds the models
  stamp "end $n: $(python3 -c "import json; print(json.load(open('$d/status.json'))['state'])" 2>&1)"
}

summary() { # shape run-name plan-json out-name
  python3 - "$1" "$2" "$R" "$GPU_NAME" "$GPU" "$3" "$4" <<'PY'
import json, os, statistics, sys

import yaml

m, n, R, gpu_name, gpu, plan_path, out_name = sys.argv[1:8]


def load(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except Exception:
        return default


lines = []
try:
    with open(f"{R}/{n}/metrics.jsonl") as fh:
        lines = [json.loads(x) for x in fh if x.strip()]
except OSError:
    pass
# An OOM fallback restarts the run (a new attempt, a new start line): the measured row is the
# last attempt's; the earlier ones are reported apart (how far they came, what they peaked at).
starts = [i for i, x in enumerate(lines) if x.get("kind") == "start"] or [0]
attempts = [lines[a:b] for a, b in zip(starts, [*starts[1:], len(lines)])]
lines = attempts[-1]
start = next((x for x in lines if x.get("kind") == "start"), {})
steps = [x for x in lines if x.get("kind") == "step"]
end = next((x for x in lines if x.get("kind") == "end"), {})
status = load(f"{R}/{n}/status.json", {}) or {}
warm = [s for s in steps if s["step"] >= 3] or steps  # step 1 compiles, step 2 settles
checked = load(f"{R}/{m}-lengths.json", {}).get("tokens") or {}
plan = load(plan_path, {})
nolig = (load(f"{R}/{m}-plan-nolig.json", {}).get("estimate") or {}).get("memory") or {}
est = plan.get("estimate") or {}
thr, mem = est.get("throughput") or {}, est.get("memory") or {}
with open(f"{R}/{n}.yaml") as fh:
    tuned = yaml.safe_load(fh)["training"]
make = {}
try:
    with open(f"{R}/{m}-make.txt") as fh:
        make = json.loads([x for x in fh if x.startswith("{")][-1])
except Exception:
    pass
GIB = 2**30


def med(key):
    vals = [s[key] for s in warm if s.get(key) is not None]
    return round(statistics.median(vals), 4) if vals else None


def peak(key):
    vals = [max(s[key]) for s in steps if s.get(key)]
    return max(vals) if vals else None


def attempt_row(part):
    """An attempt that did not finish: its settings, how far it came, its peak, its error."""
    first = next((x for x in part if x.get("kind") == "start"), {})
    done = [x for x in part if x.get("kind") == "step"]
    last = next((x for x in part if x.get("kind") == "end"), {})
    return {"recompute_layers": first.get("recompute_layers"), "steps": len(done),
            "peak_mem_gib": max((max(x["peak_mem_gib"]) for x in done if x.get("peak_mem_gib")), default=None),
            "peak_reserved_gib": max((max(x["peak_reserved_gib"]) for x in done if x.get("peak_reserved_gib")), default=None),
            "error": (last.get("error") or "")[:120]}  # fmt: skip


time_w = sum(s.get("step_time_s") or 0 for s in warm)
out = {
    "shape": m,
    "device": gpu_name or None,
    "tune_gpu": gpu,
    "gpu_name_start": start.get("gpu_name"),
    "model": {k: make.get(k) for k in ("family", "n_params", "tokenizer_tokens", "config_vocab", "tied")},
    "n_params_entry": start.get("n_params"),
    "chat_template": start.get("chat_template"),
    "chat_template_reason": start.get("chat_template_reason"),
    "pad_token": start.get("pad_token"),
    "attn_implementation": start.get("attn_implementation"),
    "kernels": {k: start.get(k) for k in ("use_liger_kernel", "optim", "packing")},
    "data_check": {k: checked.get(k) for k in ("chat_template", "unmaskable", "n", "mean", "p50", "p90", "p99", "max", "truncated_share", "mismatched")},
    "tuned": {k: tuned.get(k) for k in ("packing", "pack_tokens", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", "recompute_layers", "use_liger_kernel", "optim", "compile_layers", "fsdp", "max_steps")},
    "predicted": {
        "real_tokens_per_s": thr.get("real_tokens_per_s"),
        "tokens_per_s": thr.get("tokens_per_s"),
        "real_mfu": thr.get("real_mfu"),
        "mfu": thr.get("mfu"),
        "peak_allocated_gib": round(mem["peak_allocated"] / GIB, 2) if mem.get("peak_allocated") else None,
        "peak_reserved_gib": round(mem["peak_reserved"] / GIB, 2) if mem.get("peak_reserved") else None,
        "total_per_gpu_gib": mem.get("total_per_gpu_gib"),
        "breakdown_gib": {k: round(v / GIB, 2) for k, v in (mem.get("breakdown") or {}).items()},
    },
    "predicted_without_liger": {
        "logits_loss_gib": round((nolig.get("breakdown") or {}).get("logits + loss", 0) / GIB, 2),
        "peak_reserved_gib": round(nolig["peak_reserved"] / GIB, 2) if nolig.get("peak_reserved") else None,
        "total_per_gpu_gib": nolig.get("total_per_gpu_gib"),
        "fits": nolig.get("fits"),
    },
    "measured": {
        "steps": len(steps),
        "steps_in_median": len(warm),
        "first_step_s": steps[0].get("step_time_s") if steps else None,
        "real_tokens_per_s_median": med("tokens_nonpad_per_s"),
        "real_tokens_per_s_mean": round(sum(s.get("tokens_nonpad") or 0 for s in warm) / time_w, 1) if time_w else None,
        "tokens_per_s_median": med("tokens_per_s"),
        "mfu_median": med("mfu"),
        "real_mfu_median": med("mfu_nonpad"),
        "peak_mem_gib": peak("peak_mem_gib"),
        "peak_reserved_gib": peak("peak_reserved_gib"),
        "loss_first": steps[0].get("loss") if steps else None,
        "loss_last": steps[-1].get("loss") if steps else None,
        "train_runtime_s": end.get("train_runtime"),
        "end_ok": end.get("ok"),
        "end_error": end.get("error"),
    },
    "run_state": status.get("state"),
    "attempts": len(attempts),
    "fallback": status.get("fallback"),
    "earlier_attempts": [attempt_row(a) for a in attempts[:-1]],
}
out["run"] = n
with open(f"{R}/{out_name}.json", "w") as fh:
    json.dump(out, fh, indent=1)
if os.environ.get("OUT"):  # at once: a call stopped at its limit still returns it
    with open(os.path.join(os.environ["OUT"], f"{out_name}.json"), "w") as fh:
        json.dump(out, fh, indent=1)
p, q = out["predicted"], out["measured"]
print(f"{out_name}: template {out['chat_template']}, unmaskable {out['data_check']['unmaskable']}; "
      f"real tok/s predicted {p['real_tokens_per_s']} measured {q['real_tokens_per_s_median']}; "
      f"MFU predicted {p['mfu']} measured {q['mfu_median']}; peak predicted {p['peak_allocated_gib']}/"
      f"{p['peak_reserved_gib']} GiB measured {q['peak_mem_gib']}/{q['peak_reserved_gib']} GiB; "
      f"loss {q['loss_first']} -> {q['loss_last']}"
      + (f"; attempt {out['attempts']} after: {out['fallback']}" if out["attempts"] > 1 else ""))
PY
}

i=0; set -- $MODELS; total=$#
for m in $MODELS; do
  i=$((i + 1))
  [ -s /tmp/fam-m$m/config.json ] || { stamp "skip $m: no model ($(tail -n 2 $R/$m-make.txt | tr '\n' ' '))"; continue; }
  base $m
  stamp "tune $m"
  # --no-probe: the predicted choice (on its own GPU tune measures its top 3 first, minutes each)
  timeout 90 python3 -m tui.cli tune $R/$m-base.yaml --gpu $GPU --lengths $R/$m-lengths.json \
    --host-ram 128 ${TUNE_ARGS:---no-probe} --write $R/$m-tuned.yaml --force > $R/$m-tune.txt 2>&1
  head -n 12 $R/$m-tune.txt
  [ -s $R/$m-tuned.yaml ] || { stamp "tune $m wrote no preset"; continue; }
  timeout 60 python3 -m tui.cli plan $R/$m-tuned.yaml --gpu $GPU --lengths $R/$m-lengths.json \
    --host-ram 128 --json > $R/$m-plan.json 2> $R/$m-plan.err
  timeout 60 python3 -m tui.cli plan $R/$m-tuned.yaml --gpu $GPU --lengths $R/$m-lengths.json \
    --host-ram 128 > $R/$m-plan.txt 2>&1
  sed -e '/use_liger_kernel/d' -e 's/^name: .*/name: fam-'$m'-nolig/' $R/$m-tuned.yaml > $R/$m-nolig.yaml
  timeout 60 python3 -m tui.cli plan $R/$m-nolig.yaml --gpu $GPU --lengths $R/$m-lengths.json \
    --host-ram 128 --json > $R/$m-plan-nolig.json 2> $R/$m-plan-nolig.err
  # the first model leaves the second its share: (time left - 40 s for the files) / models left
  lim=$(( ($(left) - 40) / (total - i + 1) ))
  [ $lim -gt 60 ] || { stamp "skip launch $m: ${lim}s"; continue; }
  runcopy $R/$m-tuned.yaml $R/$m-tuned-run.yaml
  launch_run $m $m-tuned-run $lim
  summary $m $m-tuned-run $R/$m-plan.json $m-summary 2>&1 | tee -a $R/timeline.txt
  lim=$(( ($(left) - 40) / (total - i + 1) ))
  if { grep -qi "out of memory" $R/$m-tuned-run/train.log.tail 2>/dev/null || [ -n "${FORCE_GC:-}" ]; } \
    && [ $lim -gt 100 ]; then
    # the tuned preset did not fit: the same with full recompute, fewer steps
    sed -e 's/gradient_checkpointing: .*/gradient_checkpointing: true/' -e '/recompute_layers/d' \
      -e 's/max_steps: .*/max_steps: 15/' -e 's/^name: .*/name: fam-'$m'-gc/' $R/$m-tuned.yaml > $R/$m-gc.yaml
    timeout 60 python3 -m tui.cli plan $R/$m-gc.yaml --gpu $GPU --lengths $R/$m-lengths.json \
      --host-ram 128 --json > $R/$m-plan-gc.json 2> $R/$m-plan-gc.err
    runcopy $R/$m-gc.yaml $R/$m-gc-run.yaml
    launch_run $m $m-gc-run $lim
    summary $m $m-gc-run $R/$m-plan-gc.json $m-gc-summary 2>&1 | tee -a $R/timeline.txt
  fi
done

# With time left: the tuned preset without Liger (the full logits of the large vocabulary).
for m in $MODELS; do
  [ -s $R/$m-nolig.yaml ] || continue
  lim=$(( $(left) - 40 )); [ $lim -gt 150 ] && lim=150
  [ $lim -gt 100 ] || { stamp "skip $m-nolig: $(left)s left"; continue; }
  runcopy $R/$m-nolig.yaml $R/$m-nolig-run.yaml
  sed -i 's/max_steps: .*/max_steps: 12/' $R/$m-nolig-run.yaml
  launch_run $m $m-nolig-run $lim
  summary $m $m-nolig-run $R/$m-plan-nolig.json $m-nolig-summary 2>&1 | tee -a $R/timeline.txt
done

stamp done
cp $R/timeline.txt $R/gpu_name.txt /tmp/ 2>/dev/null
python3 -c "
import glob, json
print(json.dumps({p.rsplit('/', 1)[1]: json.load(open(p)) for p in sorted(glob.glob('$R/*-summary.json'))}, indent=1))
" > $OUT/all-summaries.json 2>/dev/null  # every row (gc and nolig ones too) in one file
cd /tmp && tar czf $OUT/families.tar.gz $(basename $R) && echo "files in $OUT: $(ls $OUT | tr '\n' ' ')"
