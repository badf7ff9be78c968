#!/usr/bin/env python3
"""Calibrate the planner on real GPUs: peak memory and tokens/s for a grid of configurations.

Runs short trainings (a few optimizer steps) of Llama models made on the spot (random weights,
a sentencepiece tokenizer trained on the bundled sample conversations) through trainwiz's own
entry, ``backend/entry/train_entry.py``, under torchrun, exactly as a launch does; the only
change is that the final model save is skipped (calibration measures training, not a 14 GB
write). Each configuration's metrics.jsonl (written by the entry) gives the step times and
torch's peak allocated/reserved memory; an NVML thread records what nvidia-smi would show.
Every row also carries the planner's prediction, so ``--table`` can check the acceptance:
peak within +-10% and no configuration predicted to fit running out of memory.

Usage on the GPU machine (python with torch, transformers 4.57, fschat 0.2.36, sentencepiece):
    python3 benchmarks/calibrate_gpu.py --grid 1gpu --out "$OUT" [--resume-from rows.jsonl]
    python3 benchmarks/calibrate_gpu.py --grid 2gpu --out "$OUT"
    python3 benchmarks/calibrate_gpu.py --table rows.jsonl [more.jsonl ...]  # Markdown table
(the table re-predicts every row with the current planner; --stored-pred shows the recorded ones)
Resumable: configurations already in --resume-from (or the work dir's results) are skipped;
a time budget (--budget-s) stops before a configuration that would not finish.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.planner import GIB, TrainSettings, estimate, gpu_spec, shape_from_config  # noqa: E402
from backend.planner.calibration import MODELS as CAL_MODELS  # noqa: E402
from backend.planner.calibration import (  # noqa: E402
    grid_settings,
    load_rows,
    repredict,
    tuned_checks,
)

# The 1.35B of the notes' H200 table, an OpenLLaMA-3B-shaped model (3.43B) and a CPU smoke model.
MODELS = CAL_MODELS
SEQ = 2048

# name: (model, nproc, micro-batch, grad accumulation, checkpointing, offload), in priority order.
GRIDS: dict[str, list[tuple[str, str, int, int, int, str, bool]]] = {
    "1gpu": [
        ("1b_b8_nogc", "1b", 1, 8, 1, "none", False),
        ("1b_b1_ga4_nogc", "1b", 1, 1, 4, "none", False),
        ("1b_b2_nogc", "1b", 1, 2, 1, "none", False),
        ("1b_b8_fsdpac", "1b", 1, 8, 1, "fsdp", False),
        ("3b_b1_gc", "3b", 1, 1, 1, "trainer", False),
        ("3b_b4_nogc", "3b", 1, 4, 1, "none", False),
        ("3b_b8_nogc", "3b", 1, 8, 1, "none", False),
        ("3b_b8_gc", "3b", 1, 8, 1, "trainer", False),
        ("3b_b2_nogc", "3b", 1, 2, 1, "none", False),
        ("1b_b4_gc", "1b", 1, 4, 1, "trainer", False),
        ("3b_offload_b4_gc", "3b", 1, 4, 1, "trainer", True),
    ],
    "2gpu": [
        ("3b_seed_offload_b1_gc_2g", "3b", 2, 1, 1, "trainer", True),  # the seed's configuration
        ("1b_b8_nogc_2g", "1b", 2, 8, 1, "none", False),
        ("3b_b4_nogc_2g", "3b", 2, 4, 1, "none", False),
        ("3b_b8_nogc_2g", "3b", 2, 8, 1, "none", False),
        ("3b_b8_gc_2g", "3b", 2, 8, 1, "trainer", False),
        ("3b_b8_fsdpac_2g", "3b", 2, 8, 1, "fsdp", False),
        ("1b_b8_fsdpac_2g", "1b", 2, 8, 1, "fsdp", False),
        ("1b_b1_ga4_nogc_2g", "1b", 2, 1, 4, "none", False),
        ("3b_b2_gc_2g", "3b", 2, 2, 1, "trainer", False),
    ],
    "smoke": [("tiny_b2_ga2_cpu", "tiny", 1, 2, 2, "none", False)],
}

MAKE_MODEL = r"""
import json, os, sys, torch, sentencepiece as spm
from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer
cfg, out, data = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
corpus = os.path.join(out, "corpus.txt")
with open(corpus, "w") as fh:
    for rec in json.load(open(data)):
        fh.write(" ".join(t["value"].replace("\n", " ") for t in rec["conversations"]) + "\n")
spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out, "sp"),
    vocab_size=2000, model_type="bpe", byte_fallback=True, hard_vocab_limit=False,
    unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
LlamaTokenizer(vocab_file=os.path.join(out, "sp.model"), legacy=True).save_pretrained(out)
torch.manual_seed(0)
with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
    model = LlamaForCausalLM(LlamaConfig(**cfg, max_position_embeddings=2048, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False)).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
print(sum(p.numel() for p in model.parameters()))
"""

WRAPPER = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("train_entry", sys.argv.pop(1))
entry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(entry)
entry.save_model = lambda trainer, args: None  # calibration: skip the final full-model save
entry.main()
"""


def settings_for(
    nproc: int, micro: int, ga: int, ckpt: str, offload: bool, cpu: bool = False
) -> TrainSettings:
    if cpu:
        return TrainSettings(micro_batch=micro, grad_accum=ga, seq=256, fsdp="", mixed=False)
    return grid_settings(nproc, micro, ga, ckpt, offload, SEQ)


def entry_argv(model_dir: Path, data: Path, out: Path, s: TrainSettings, steps: int) -> list[str]:
    """The same flags a trainwiz preset renders (FastChat's and HF's names)."""
    argv = [
        "--model_name_or_path", str(model_dir), "--data_path", str(data),
        "--output_dir", str(out), "--bf16", str(s.mixed), "--tf32", str(s.mixed),
        "--num_train_epochs", "1", "--max_steps", str(steps),
        "--per_device_train_batch_size", str(s.micro_batch),
        "--gradient_accumulation_steps", str(s.grad_accum),
        "--save_strategy", "no", "--learning_rate", "2e-5", "--lr_scheduler_type", "cosine",
        "--logging_steps", "1",
        "--model_max_length", str(s.seq), "--gradient_checkpointing", str(s.trainer_gc),
        "--lazy_preprocess", "True", "--report_to", "none", "--disable_tqdm", "True",
        "--attn_implementation", "sdpa",
    ]  # fmt: skip
    if s.fsdp:
        argv += ["--fsdp", s.fsdp, "--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
    if s.fsdp_ac:
        argv += ["--fsdp_config", json.dumps({"activation_checkpointing": True})]
    return argv


class NvmlPeak(threading.Thread):
    """Max memory used per GPU (what nvidia-smi shows) while a configuration runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.peak: list[int] = []

    def run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            self.peak = [0] * len(handles)
            while not self.stop.wait(0.25):
                for i, h in enumerate(handles):
                    self.peak[i] = max(self.peak[i], int(pynvml.nvmlDeviceGetMemoryInfo(h).used))
        except Exception:  # no NVML: the torch counters still come back
            return


def reusable(name: str, given: dict[str, str]) -> Path | None:
    """A model directory made elsewhere (--model-dir 1b=/tmp/llama-1b) if its shape matches."""
    if name not in given:
        return None
    path = Path(given[name])
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        print(f"[calibrate] {path}: no readable config.json; making {name} here", flush=True)
        return None
    dims = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab")
    have, want = shape_from_config(config), shape_from_config(MODELS[name])
    if any(getattr(have, d) != getattr(want, d) for d in dims):
        print(f"[calibrate] {path}: not the {name} shape; making it here", flush=True)
        return None
    return path


def make_model(python: str, name: str, work: Path, given: dict[str, str] | None = None) -> Path:
    found = reusable(name, given or {})
    if found is not None:
        return found
    target = work / f"llama-{name}"
    if (target / "model.safetensors.index.json").exists() or (
        target / "model.safetensors"
    ).exists():
        return target
    data = ROOT / "presets" / "data" / "sample_conversations.json"
    t0 = time.time()
    subprocess.run(
        [python, "-c", MAKE_MODEL, json.dumps(MODELS[name]), str(target), str(data)], check=True
    )
    print(f"[calibrate] made {target} in {time.time() - t0:.0f} s", flush=True)
    return target


def summarize(metrics: Path, warmup: int) -> dict[str, object]:
    steps = []
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "step":
                steps.append(rec)
    if not steps:
        return {}
    timed = steps[warmup:] or steps[-1:]
    step_s = statistics.median(r["step_time_s"] for r in timed)
    tokens = statistics.median(r["tokens"] for r in timed)
    last = steps[-1]
    return {
        "steps_done": len(steps),
        "median_step_s": round(step_s, 4),
        "tokens_per_s": round(tokens / step_s, 1),
        "mfu": last.get("mfu") and round(statistics.median(r["mfu"] for r in timed), 4),
        "max_alloc_gib": max(last.get("peak_mem_gib") or [0]),
        "max_reserved_gib": max(last.get("peak_reserved_gib") or [0]),
    }


def run_config(args: argparse.Namespace, cfg: tuple, work: Path) -> dict[str, object]:
    name, model, nproc, micro, ga, ckpt, offload = cfg
    s = settings_for(nproc, micro, ga, ckpt, offload, cpu=model == "tiny")
    shape = shape_from_config(MODELS[model])
    pred = estimate(shape, s, gpu_spec(args.gpu))
    row: dict[str, object] = {
        "tag": name, "model": model, "n_params": shape.n_params, "world": nproc,
        "micro_batch": micro, "grad_accum": ga, "checkpointing": ckpt, "offload": offload,
        "seq": s.seq, "pred_alloc_gib": round(pred.memory.peak_allocated / GIB, 2),
        "pred_reserved_gib": round(pred.memory.peak_reserved / GIB, 2),
        "pred_total_gib": round(pred.memory.total_per_gpu / GIB, 2),
        "pred_fits": pred.memory.fits, "pred_tight": pred.memory.tight, "pred_tokens_per_s": round(pred.throughput.tokens_per_s, 1),
    }  # fmt: skip
    given = dict(item.split("=", 1) for item in args.model_dir)
    model_dir = make_model(args.python, model, work, given)
    run_dir = work / "runs" / name
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    run_dir.mkdir(parents=True)
    wrapper = run_dir / "calib_entry.py"
    wrapper.write_text(WRAPPER)
    steps = args.offload_steps if offload else args.steps
    argv = [
        args.python, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
        f"--master_port={29600 + zlib.crc32(name.encode()) % 300}", str(wrapper),
        str(ROOT / "backend" / "entry" / "train_entry.py"),
        *entry_argv(model_dir, ROOT / "presets" / "data" / "sample_conversations.json",
                    run_dir / "output", s, steps),
    ]  # fmt: skip
    env = {**os.environ, "TRAINWIZ_METRICS": str(run_dir / "metrics.jsonl")}
    sampler = NvmlPeak()
    sampler.start()
    t0 = time.time()
    with open(run_dir / "train.log", "w") as log:
        # Own process group: on timeout the torchrun workers go too, and free their GPU memory
        # before the next configuration starts.
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            rc: int | str = proc.wait(timeout=args.config_timeout_s)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    sampler.stop.set()
    sampler.join(timeout=2)
    text = (run_dir / "train.log").read_text(errors="replace")
    row.update(summarize(run_dir / "metrics.jsonl", warmup=2 if steps > 4 else 1))
    row["wall_s"] = round(time.time() - t0, 1)
    row["nvml_peak_gib"] = [round(b / GIB, 2) for b in sampler.peak]
    row["rc"] = rc
    row["oom"] = "out of memory" in text.lower() or "OutOfMemoryError" in text
    row["ok"] = rc == 0 and "tokens_per_s" in row
    if not row["ok"]:
        row["log_tail"] = text.splitlines()[-15:]
    return row


def calibrate(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    out = Path(args.out or os.environ.get("OUT") or work / "out")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    results = out / f"calibration-{args.grid}.jsonl"
    done: set[str] = set()
    for source in [*(Path(p) for p in args.resume_from), work / f"results-{args.grid}.jsonl"]:
        if source.exists():
            for line in source.read_text().splitlines():
                if line.strip():
                    done.add(json.loads(line)["tag"])
                    if source.parent != out:
                        with open(results, "a") as fh:
                            fh.write(line + "\n")
    start = time.time()
    grid = [c for c in GRIDS[args.grid] if not args.only or c[0] in args.only]
    for cfg in grid:
        if cfg[0] in done:
            print(f"[calibrate] {cfg[0]}: already measured, skipped", flush=True)
            continue
        left = args.budget_s - (time.time() - start)
        if left < args.min_left_s:
            print(f"[calibrate] budget spent ({left:.0f} s left): stop before {cfg[0]}")
            break
        args.config_timeout_s = max(30, min(args.config_timeout_s_max, left - 10))
        row = run_config(args, cfg, work)
        line = json.dumps(row)
        print(f"[calibrate] {line}", flush=True)
        for path in (results, work / f"results-{args.grid}.jsonl"):
            with open(path, "a") as fh:
                fh.write(line + "\n")
    return 0


def tuned_vs_measured(rows: list[dict], gpu: str) -> list[str]:
    """Per model and GPU count: the configuration tune() picks, and how fast it really ran."""
    out = ["", "| model | GPUs | tune picks (from the seed's settings) | its measured tokens/s | "
           "best measured | ratio |", "|---|---|---|---|---|---|"]  # fmt: skip
    for c in tuned_checks(rows, gpu_spec(gpu)):
        ckpt = "fsdp-ac" if c.pick.fsdp_ac else ("gc" if c.pick.trainer_gc else "no recompute")
        ratio = f"{c.ratio:.1%}" if c.ratio else "not measured"
        out.append(
            f"| {c.model} | {c.world} | b{c.pick.micro_batch} ga{c.pick.grad_accum} {ckpt}"
            f"{' offload' if c.pick.offload else ''} | {c.measured or '-'} | {c.best} "
            f"({c.best_tag}) | {ratio} |"
        )
    return out


def _pct(pred: float, measured: float | None) -> str:
    return f"{pred / measured - 1:+.1%}" if measured else "-"


def table(paths: list[str], gpu: str = "h200", stored: bool = False) -> int:
    """Markdown table of measured vs predicted, plus the acceptance verdict.

    Predictions are made NOW by the current planner from each row's configuration (``stored``
    shows the ones recorded with the row instead, i.e. the planner of measurement time)."""
    rows = load_rows(list(paths))
    print("| config | GPUs | tokens/s measured | predicted | err | alloc GiB measured | "
          "predicted | err | reserved GiB measured | predicted | err | verdict | outcome |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    n_alloc = n_res = fit_oom = tight_oom = measured_rows = 0
    for r in rows:
        if stored and "pred_alloc_gib" in r:
            p_alloc, p_res = r["pred_alloc_gib"], r["pred_reserved_gib"]
            p_tok, fits, tight = r["pred_tokens_per_s"], r["pred_fits"], r["pred_tight"]
        else:
            e = repredict(r, gpu_spec(gpu))
            p_alloc = round(e.memory.peak_allocated / GIB, 2)
            p_res = round(e.memory.peak_reserved / GIB, 2)
            p_tok, fits, tight = round(e.throughput.tokens_per_s), e.memory.fits, e.memory.tight
        m_alloc, m_res, m_tok = (
            r.get("max_alloc_gib"),
            r.get("max_reserved_gib"),
            r.get("tokens_per_s"),
        )
        if m_alloc:
            measured_rows += 1
            n_alloc += abs(p_alloc / m_alloc - 1) <= 0.10
            n_res += abs(p_res / m_res - 1) <= 0.10
        fit_oom += bool(r.get("oom") and fits and not tight)
        tight_oom += bool(r.get("oom") and tight)
        verdict = ("fits, tight" if tight else "fits") if fits else "does not fit"
        outcome = "ran" if r.get("ok") else ("OOM" if r.get("oom") else f"failed rc={r.get('rc')}")
        print(f"| {r['tag']} | {r['world']} | {m_tok or '-'} | {p_tok} | {_pct(p_tok, m_tok)} | "
              f"{m_alloc or '-'} | {p_alloc} | {_pct(p_alloc, m_alloc)} | {m_res or '-'} | "
              f"{p_res} | {_pct(p_res, m_res)} | {verdict} | {outcome} |")  # fmt: skip
    for line in tuned_vs_measured(rows, gpu):
        print(line)
    print(f"\nOf {measured_rows} measured configurations, {n_alloc} within +-10% on peak allocated "
          f"and {n_res} on peak reserved; {fit_oom} predicted to fit (not tight) ran out of "
          f"memory; {tight_oom} predicted tight ran out of memory.")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="1gpu")
    parser.add_argument("--only", nargs="*", default=[], help="configuration names to run")
    parser.add_argument("--out", help="results folder (default $OUT)")
    parser.add_argument("--workdir", default="/tmp/trainwiz-calib", help="models + run dirs")
    parser.add_argument("--resume-from", nargs="*", default=[], help="earlier results JSONL")
    parser.add_argument("--python", default=sys.executable, help="the training python")
    parser.add_argument(
        "--model-dir", nargs="*", default=[], metavar="NAME=DIR",
        help="reuse a model made elsewhere, e.g. 1b=/tmp/llama-1b (its shape is checked)",
    )  # fmt: skip
    parser.add_argument("--gpu", default="h200", help="GPU name for the predictions")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--offload-steps", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--min-left-s", type=float, default=45)
    parser.add_argument("--config-timeout-s-max", type=float, default=180)
    parser.add_argument("--table", nargs="*", help="print the Markdown table of these JSONL files")
    parser.add_argument(
        "--stored-pred", action="store_true",
        help="with --table: show the predictions recorded in the rows, not today's planner's",
    )  # fmt: skip
    args = parser.parse_args()
    if args.table:
        return table(args.table, args.gpu, args.stored_pred)
    return calibrate(args)


if __name__ == "__main__":
    sys.exit(main())
