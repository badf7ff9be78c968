#!/usr/bin/env bash
# GPU proof of the launch path: `trainwiz launch --detach` on the host runner, a ~1.35B Llama
# made on the spot (random weights, the tiny-model code at 1B size: hidden 2048, 24 layers,
# 16 heads, ffn 5504, vocab 32000), FSDP full_shard, bf16, seq 2048, on 1 GPU and on 2 GPUs.
# Everything goes through the product: preset -> plan -> run dir -> watcher -> torchrun ->
# backend/entry/train_entry.py -> metrics.jsonl; the model is made by the launch's own
# "model" prepare step. Results land in $OUT/<config>/ plus $OUT/summary.{json,md}.
#
# Usage (repo root, on the GPU machine):
#   OUT=/some/dir benchmarks/gpu_launch.sh [1|2|all]      (default: all GPUs counts that exist)
# Needs on PYTHONPATH (e.g. pip install --target /tmp/site): fschat 0.2.36, transformers 4.57.6,
# tokenizers 0.22.2, huggingface_hub 0.36.0, and for the wizard side pydantic 2 (+ pydantic-core,
# annotated-types, typing-inspection) if python3 lacks it. Env: PYTHON (default python3),
# MAX_STEPS (default 30), BATCH (per-device micro-batch, default 4), TRAINWIZ_HOME.
# SMOKE=1 checks this script itself on a CPU box: a tiny model, no bf16/tf32/FSDP, 1 process.
set -euo pipefail
cd "$(dirname "$0")/.."

WHICH="${1:-all}"
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_launch_out}"
MAX_STEPS="${MAX_STEPS:-30}"
BATCH="${BATCH:-4}"
export TRAINWIZ_HOME="${TRAINWIZ_HOME:-/tmp/trainwiz-gpu-home}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/presets" "$TRAINWIZ_HOME"

log() { printf 'gpu_launch: %s\n' "$*" | tee -a "$OUT/gpu_launch.log" >&2; }

"$PY" - <<'EOF' 2>&1 | tee "$OUT/versions.txt"
import importlib, sys
print("python", sys.version.split()[0])
missing = []
for name in ("torch", "transformers", "fastchat", "pydantic", "yaml", "sentencepiece", "accelerate"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "?"))
    except Exception as exc:
        missing.append(name)
        print(name, "MISSING", type(exc).__name__, exc)
import os, torch
print("cuda", torch.cuda.is_available(), torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
try:
    import flash_attn  # noqa: F401
    print("flash_attn present")
except Exception as exc:
    print("flash_attn absent:", type(exc).__name__)
if missing:
    sys.exit("missing modules: " + ", ".join(missing))
EOF

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
case "$WHICH" in
1) COUNTS="1" ;;
2) COUNTS="2" ;;
all) COUNTS="1"; if [ "$NGPU" -ge 2 ]; then COUNTS="1 2"; fi ;;
*) echo "usage: $0 [1|2|all]" >&2; exit 2 ;;
esac

write_preset() { # $1 = nproc, $2 = file
    if [ "${SMOKE:-0}" = 1 ]; then
        sed -e 's/hidden_size: 2048/hidden_size: 64/' -e 's/intermediate_size: 5504/intermediate_size: 176/' \
            -e 's/num_hidden_layers: 24/num_hidden_layers: 2/' -e 's/num_attention_heads: 16/num_attention_heads: 4/' \
            -e 's/vocab_size: 32000/vocab_size: 512/' -e 's/device: cuda/device: cpu/' -e 's/bf16: true/bf16: false/' \
            -e '/tf32:/d' -e '/fsdp/d' -e 's/model_max_length: 2048/model_max_length: 256/' \
            -e 's/llama-1b-random/llama-smoke/' <(SMOKE=0 write_preset "$1" /dev/stdout) > "$2"
        return
    fi
    cat > "$2" <<EOF
schema: 1
name: gpu-1b-${1}gpu
description: GPU proof - 1.35B Llama made on the spot, FSDP full_shard, host runner
model:
  source: tiny
  dir: "@home/models/llama-1b-random"
  tiny:
    hidden_size: 2048
    intermediate_size: 5504
    num_hidden_layers: 24
    num_attention_heads: 16
    vocab_size: 32000
    max_position_embeddings: 2048
launch:
  runner: host
  entry: trainwiz
  device: cuda
  nproc_per_node: $1
  master_port: $((29600 + $1))
training:
  data_path: "@sample"
  output_dir: "@run/output"
  bf16: true
  num_train_epochs: 3
  max_steps: $MAX_STEPS
  per_device_train_batch_size: $BATCH
  gradient_accumulation_steps: 1
  save_strategy: "no"
  learning_rate: 2.0e-5
  warmup_ratio: 0.03
  lr_scheduler_type: cosine
  logging_steps: 1
  fsdp: "full_shard auto_wrap"
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  tf32: true
  model_max_length: 2048
  lazy_preprocess: true
  report_to: none
  attn_implementation: auto
EOF
}

for n in $COUNTS; do
    name="1b_fsdp_${n}gpu"
    preset="$OUT/presets/$name.yaml"
    write_preset "$n" "$preset"
    log "$name: launching"
    start=$(date +%s)
    run_id=$("$PY" -m tui.cli launch "$preset" --detach)
    log "$name: run $run_id"
    "$PY" -m tui.cli runs --json > "$OUT/${name}_runs_after_launch.json" || true
    "$PY" -m tui.cli logs -f "$run_id" > /dev/null || true
    log "$name: ended after $(( $(date +%s) - start )) s"
    run_dir="$TRAINWIZ_HOME/runs/$run_id"
    mkdir -p "$OUT/$name"
    cp "$run_dir/status.json" "$run_dir/plan.json" "$run_dir/preset.yaml" "$OUT/$name/" || true
    cp "$run_dir/metrics.jsonl" "$OUT/$name/" 2>/dev/null || true
    grep -v 'it/s\]$' "$run_dir/train.log" | tail -n 300 > "$OUT/$name/train.log.tail" || true
    ls -la "$run_dir/output" > "$OUT/$name/output_ls.txt" 2>&1 || true
    "$PY" -m tui.cli runs --json > "$OUT/${name}_runs_final.json" || true
done

"$PY" - "$OUT" <<'EOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = []
for d in sorted(p for p in out.iterdir() if p.is_dir() and (p / "status.json").exists()):
    status = json.loads((d / "status.json").read_text())
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] if (d / "metrics.jsonl").exists() else []
    start = next((x for x in lines if x["kind"] == "start"), {})
    end = next((x for x in lines if x["kind"] == "end"), {})
    steps = [x for x in lines if x["kind"] == "step"]
    warm = steps[3:] or steps  # the first steps include warm-up (allocator, cudnn, FSDP init)
    def med(key):
        values = [x[key] for x in warm if x.get(key) is not None]
        return statistics.median(values) if values else None
    rows.append({
        "config": d.name, "state": status["state"], "exit_code": status["exit_code"],
        "steps": len(steps), "world_size": start.get("world_size"), "gpu": start.get("gpu_name"),
        "attn": start.get("attn_implementation"), "n_params": start.get("n_params"),
        "loss_first": steps[0]["loss"] if steps else None, "loss_last": steps[-1]["loss"] if steps else None,
        "tokens_per_s_median": med("tokens_per_s"), "tokens_nonpad_per_s_median": med("tokens_nonpad_per_s"),
        "mfu_median": med("mfu"), "step_time_median_s": med("step_time_s"),
        "peak_mem_gib_last": steps[-1]["peak_mem_gib"] if steps else None,
        "peak_reserved_gib_last": steps[-1]["peak_reserved_gib"] if steps else None,
        "saved_to": end.get("saved_to"), "ok": end.get("ok"),
    })
(out / "summary.json").write_text(json.dumps(rows, indent=2))
md = ["| config | state | steps | loss first→last | tokens/s (median) | MFU | peak alloc GiB/rank | saved |",
      "|---|---|---|---|---|---|---|---|"]
for r in rows:
    mfu = f"{100 * r['mfu_median']:.1f}%" if r["mfu_median"] else "-"
    tps = f"{r['tokens_per_s_median']:,.0f}" if r["tokens_per_s_median"] else "-"
    lf = f"{r['loss_first']:.3f}→{r['loss_last']:.3f}" if r["loss_first"] is not None and r["loss_last"] is not None else "-"
    md.append(f"| {r['config']} | {r['state']} | {r['steps']} | {lf} | {tps} | {mfu} | {r['peak_mem_gib_last']} | {r['ok']} |")
(out / "summary.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
EOF
