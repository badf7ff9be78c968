"""Device proof for issue 19: an FSDP run on the GPU(s), SIGKILLed after a mid-run checkpoint,
resumed with `trainwiz resume`, compared with the same run uninterrupted; then chat and export.

Run from the repo root on the device machine (see benchmarks/device/resume_fsdp.sh). Prints one
JSON summary and copies the runs' metrics/attempts/checkpoint listings into $OUT_DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT_DIR", "/tmp/resume-out"))
NPROC = int(os.environ.get("NPROC", "1"))


def cli(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def preset(name: str) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["model"]["dir"] = "@home/models/tiny-gpu"
    data["model"]["tiny"].update(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                                 num_attention_heads=8)  # fmt: skip
    data["launch"].update(device="cuda", nproc_per_node=NPROC)
    data["training"].update(
        bf16=True, tf32=True, fsdp="full_shard auto_wrap",
        fsdp_transformer_layer_cls_to_wrap="LlamaDecoderLayer", max_steps=40, save_strategy="steps",
        save_steps=10, save_total_limit=2, eval_split=0.05, eval_strategy="steps", eval_steps=20,
        seed=5, per_device_train_batch_size=4, learning_rate=1e-3,
    )  # fmt: skip
    if os.environ.get("DRY_CPU"):  # a rehearsal of the script here: no GPU, so no FSDP
        data["launch"]["device"] = "cpu"
        data["model"]["tiny"] = {}
        for key in ("bf16", "tf32", "fsdp", "fsdp_transformer_layer_cls_to_wrap"):
            data["training"].pop(key)
    path = Path(os.environ["TRAINWIZ_HOME"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def wait_final(run_dir: Path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = json.loads(cli("runs", "--json").stdout)
        mine = next(r for r in state if r["run_id"] == run_dir.name)
        if mine["state"] in ("finished", "failed", "stopped"):
            return str(mine["state"])
        time.sleep(1)
    return "timeout"


def workers(run_dir: Path) -> list[int]:
    from backend.runs.resume import trainer_pids

    out = []
    for pid in trainer_pids(run_dir):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if not any(b"torchrun" in a for a in argv[:2]):
            out.append(pid)
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result: dict = {"nproc": NPROC}

    def save() -> None:  # after every stage: a call cut off at its limit still reports
        (OUT / "summary.json").write_text(json.dumps(result, indent=2, default=str))

    t0 = time.monotonic()
    whole = Path(
        json.loads(cli("launch", str(preset("whole")), "--detach", "--json").stdout)["run_dir"]
    )
    result["whole_state"] = wait_final(whole)
    result["whole_s"] = round(time.monotonic() - t0, 1)
    save()
    broken = Path(
        json.loads(cli("launch", str(preset("broken")), "--detach", "--json").stdout)["run_dir"]
    )
    deadline = time.monotonic() + 120
    killed = []
    while time.monotonic() < deadline and not killed:
        if list((broken / "output").glob("checkpoint-*/trainwiz-complete.json")):
            for pid in workers(broken):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)
    result["killed"] = killed
    result["broken_state"] = wait_final(broken)
    save()
    result["checkpoint_listing"] = sorted(
        str(p.relative_to(broken / "output")) for p in (broken / "output").glob("checkpoint-*/*")
    )
    res = cli("resume", broken.name)
    result["resume_rc"] = res.returncode
    result["resume_tail"] = res.stderr[-600:]
    result["resumed_state"] = wait_final(broken)
    save()

    from backend.monitor.metrics import RunStart, continued_series, read_events

    def series(run: Path) -> tuple[dict, list]:
        events = read_events(run / "metrics.jsonl")
        steps, evals = continued_series(events)
        starts = [(e.attempt, e.resumed_from) for e in events if isinstance(e, RunStart)]
        return {s.step: s.loss for s in steps if s.loss is not None}, [
            starts,
            [(e.step, e.eval_loss) for e in evals],
        ]

    a, (_sa, ea) = series(whole)
    b, (sb, eb) = series(broken)
    result["starts"] = sb
    result["steps_whole"], result["steps_resumed"] = sorted(a), sorted(b)
    common = sorted(set(a) & set(b))
    result["max_loss_diff"] = max(abs(a[k] - b[k]) for k in common) if common else None
    result["loss_diffs_after_resume"] = {
        k: a[k] - b[k] for k in common if sb[1:] and k > (sb[1][1] or 0)
    }
    result["evals"] = {"whole": ea, "resumed": eb}
    try:
        from safetensors.torch import load_file

        wa = load_file(str(whole / "output" / "model.safetensors"))
        wb = load_file(str(broken / "output" / "model.safetensors"))
        result["max_param_diff"] = max(
            float((wa[k].float() - wb[k].float()).abs().max()) for k in wa
        )
        result["param_dtype"] = str(next(iter(wa.values())).dtype)
    except Exception as exc:
        result["param_error"] = repr(exc)
    result["attempts"] = json.loads((broken / "attempts.json").read_text())
    save()
    device = "cpu" if os.environ.get("DRY_CPU") else "cuda"
    chat = cli("chat", broken.name, "--device", device, "--prompt", "Hello!", "--json")
    result["chat"] = chat.stdout[-400:] if chat.returncode == 0 else chat.stderr[-600:]
    exp = cli("export", broken.name, "--to", "/tmp/exported", "--json")
    result["export"] = exp.stdout[-500:] if exp.returncode == 0 else exp.stderr[-600:]
    result["runs"] = cli("runs").stdout
    for run in (whole, broken):
        for name in ("metrics.jsonl", "train.log"):
            if (run / name).is_file():
                shutil.copy(run / name, OUT / f"{run.name.split('-')[-1]}-{name}")
    (OUT / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
