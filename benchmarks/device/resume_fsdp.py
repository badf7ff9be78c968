"""Device proof of FSDP resume (docs/checkpoints.md): an FSDP run on the GPU(s), SIGKILLed after
a mid-run checkpoint, resumed with `trainwiz resume`, compared with the same run uninterrupted;
then chat and export.

Run from the repo root on the device machine (see benchmarks/device/resume_fsdp.sh). Prints one
JSON summary and copies the runs' metrics/attempts/checkpoint listings into $OUT_DIR.

VARIANTS="name:code_root:state_dict_type,..." runs one uninterrupted run, then one killed and
resumed run per variant (code_root: the trainwiz tree whose CLI and entry run it, e.g. an older
checkout; state_dict_type: launch.env FSDP_STATE_DICT_TYPE, or "-" for the entry's default), and
compares each one's Adam state in its last checkpoint with the uninterrupted run's (step count,
max |exp_avg diff|): the state a resume lost shows there. Without VARIANTS: the original proof.
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


def cli(*args: str, timeout: float = 150, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT]
        + [str(root)]
    )
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=root, capture_output=True, text=True,
        timeout=timeout, env=env,
    )  # fmt: skip


def preset(name: str, state_dict_type: str | None = None) -> Path:
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
    if state_dict_type:
        data["launch"].setdefault("env", {})["FSDP_STATE_DICT_TYPE"] = state_dict_type
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


def flat_tensors(obj: object, prefix: str = "") -> dict[str, object]:
    import torch

    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, (int, float)) and prefix.endswith("step"):
        return {prefix: torch.tensor(float(obj))}
    out: dict[str, object] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.update(flat_tensors(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def adam_state(checkpoint: Path) -> dict[str, object]:
    """The optimizer state of one checkpoint as {param.field: tensor}, whichever FSDP format."""
    import torch

    full = [checkpoint / n for n in ("optimizer.bin", "optimizer.pt") if (checkpoint / n).is_file()]
    if full:  # FULL_STATE_DICT (or no FSDP: the DRY_CPU rehearsal)
        raw = torch.load(full[0], map_location="cpu", weights_only=False)
    else:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        tmp = Path("/tmp") / f"optim-{checkpoint.parent.parent.name}-{checkpoint.name}.pt"
        dcp_to_torch_save(str(checkpoint / "optimizer_0"), str(tmp))
        raw = torch.load(tmp, map_location="cpu", weights_only=False)
        raw = raw.get("optimizer", raw)
    state = raw.get("state", {}) if isinstance(raw, dict) else {}
    return {k: v for k, v in flat_tensors(state).items()}


def compare_adam(whole: Path, other: Path, step: int) -> dict[str, object]:
    a = adam_state(whole / "output" / f"checkpoint-{step}")
    b = adam_state(other / "output" / f"checkpoint-{step}")
    steps = lambda s: sorted({float(v) for k, v in s.items() if k.endswith("step")})  # noqa: E731
    common = [k for k in a if k in b and not k.endswith("step")]
    diffs = [float((a[k].float() - b[k].float()).abs().max()) for k in common]
    return {
        "checkpoint": step, "entries": [len(a), len(b)], "adam_step_whole": steps(a),
        "adam_step_resumed": steps(b), "max_moment_diff": max(diffs) if diffs else None,
    }  # fmt: skip


def variants(spec: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result: dict = {"nproc": NPROC, "variants": {}}

    def save() -> None:
        (OUT / "summary.json").write_text(json.dumps(result, indent=2, default=str))

    t0 = time.monotonic()
    whole = Path(
        json.loads(cli("launch", str(preset("whole")), "--detach", "--json").stdout)["run_dir"]
    )
    result["whole_state"] = wait_final(whole)
    result["whole_s"] = round(time.monotonic() - t0, 1)
    save()
    from backend.monitor.metrics import RunStart, StepRecord, continued_series, read_events

    def series(run: Path) -> tuple[dict, dict, list, list]:
        events = read_events(run / "metrics.jsonl")
        steps, evals = continued_series(events)
        starts = [(e.attempt, e.resumed_from) for e in events if isinstance(e, RunStart)]
        return ({s.step: s.loss for s in steps if s.loss is not None},
                {s.step: s.grad_norm for s in steps if isinstance(s, StepRecord)},
                starts, [(e.step, e.eval_loss) for e in evals])  # fmt: skip

    la, ga, _, ea = series(whole)
    result["whole_evals"] = ea
    for item in spec.split(","):
        name, code, sdt = item.split(":")
        root = (ROOT / code).resolve()
        t1 = time.monotonic()
        made = cli("launch", str(preset(name, None if sdt == "-" else sdt)), "--detach", "--json",
                   root=root)  # fmt: skip
        broken = Path(json.loads(made.stdout)["run_dir"])
        deadline = time.monotonic() + 120
        killed: list[int] = []
        while time.monotonic() < deadline and not killed:
            if list((broken / "output").glob("checkpoint-*/trainwiz-complete.json")):
                for pid in workers(broken):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)
        row: dict = {"code_root": str(root), "state_dict_type": sdt, "killed": killed}
        row["broken_state"] = wait_final(broken)
        row["checkpoint_listing"] = sorted(
            p.name for p in (broken / "output").glob("checkpoint-*/*")
        )
        res = cli("resume", broken.name, root=root)
        row["resume_rc"], row["resume_tail"] = res.returncode, res.stderr[-300:]
        row["resumed_state"] = wait_final(broken)
        lb, gb, starts, eb = series(broken)
        row["starts"], row["evals"] = starts, eb
        common = sorted(set(la) & set(lb))
        row["max_loss_diff"] = max(abs(la[k] - lb[k]) for k in common) if common else None
        gcommon = [k for k in common if ga.get(k) is not None and gb.get(k) is not None]
        row["max_grad_norm_diff"] = max(abs(ga[k] - gb[k]) for k in gcommon) if gcommon else None
        row["first_differing_step"] = next(
            (k for k in common if la[k] != lb[k] or ga.get(k) != gb.get(k)), None
        )
        try:
            from safetensors.torch import load_file

            wa = load_file(str(whole / "output" / "model.safetensors"))
            wb = load_file(str(broken / "output" / "model.safetensors"))
            row["max_param_diff"] = max(
                float((wa[k].float() - wb[k].float()).abs().max()) for k in wa
            )
        except Exception as exc:
            row["param_error"] = repr(exc)
        for step in (30, 40):
            try:
                row[f"adam_{step}"] = compare_adam(whole, broken, step)
            except Exception as exc:
                row[f"adam_{step}"] = repr(exc)[:300]
        row["seconds"] = round(time.monotonic() - t1, 1)
        result["variants"][name] = row
        for fname in ("metrics.jsonl",):
            shutil.copy(broken / fname, OUT / f"{name}-{fname}")
        save()
    shutil.copy(whole / "metrics.jsonl", OUT / "whole-metrics.jsonl")
    save()
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    if os.environ.get("VARIANTS"):
        variants(os.environ["VARIANTS"])
    else:
        main()
