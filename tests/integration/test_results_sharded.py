"""chat, export and serve from a real FSDP SHARDED_STATE_DICT checkpoint, on the CPU (one
checkpoint for the three: each would otherwise train and shard its own).

The checkpoint is real but not written by the Trainer: on this CPU-only stack (transformers
4.57.6, accelerate 1.15, torch 2.13+cpu) the Trainer cannot run FSDP at all (accelerate only
turns accelerator device types into FSDP; on MULTI_CPU ``--fsdp`` silently trains DDP and saves
full weights), so ``fsdp_cpu_checkpoint.py`` writes it under torchrun (2 gloo ranks) with the
calls the Trainer's ``_save_checkpoint`` makes: torch's FSDP (FULL_SHARD, transformer auto wrap,
use_orig_params) over the tiny model a real trainwiz run trained, two AdamW steps, then
accelerate's ``save_fsdp_model``/``save_fsdp_optimizer`` (DCP ``pytorch_model_fsdp_0/``,
``optimizer_0/``) and trainwiz's marker. The same parameters gathered with FULL_STATE_DICT are
the reference the export must equal. The writer's ranks end as the entry's do
(``backend/entry/ending.py``'s ``finish``), so its output also shows a real 2-rank FSDP job
ending cleanly on every rank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.entry.checkpoints import MARKER
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    ROOT,
    cli,
    home,
    wait_state,
)
from tests.integration.test_rank_ending import assert_clean
from tests.integration.test_resume_host import FINAL, free_port, launch, preset_file
from tests.integration.test_serve import ask, cmdlines, nothing_left

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

WRITER = Path(__file__).with_name("fsdp_cpu_checkpoint.py")
# float32 on both sides, the same tensors copied out of the shards: measured difference 0.0.
LOGIT_TOL = 1e-6


def sharded_checkpoint(model: Path, checkpoint: Path, reference: Path, step: int) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")  # the test environment's torch
    argv = [str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(WRITER)]
    argv += ["--model", str(model), "--checkpoint", str(checkpoint)]
    argv += ["--reference", str(reference), "--step", str(step)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_clean(proc)  # both FSDP ranks ended the entry's way (ending.py): no abort, no threads


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def logits(model_dir: Path):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.arange(3, 40).reshape(1, -1)
    with torch.no_grad():
        return type(model).__name__, model(input_ids=ids).logits


def test_chat_export_and_serve_from_a_sharded_fsdp_checkpoint(tmp_path: Path) -> None:
    preset = preset_file(tmp_path, "sharded", plain=True)
    data = yaml.safe_load(preset.read_text())
    data["training"]["max_steps"] = 10
    preset.write_text(yaml.safe_dump(data))
    run_dir = launch(preset)
    assert wait_state(run_dir.name, FINAL)["state"] == "finished"
    out = run_dir / "output"
    checkpoint = out / "checkpoint-12"
    sharded_checkpoint(out, checkpoint, tmp_path / "reference", 12)
    assert (checkpoint / "pytorch_model_fsdp_0" / ".metadata").is_file()
    assert (checkpoint / "optimizer_0" / ".metadata").is_file()
    assert not list(checkpoint.glob("*.safetensors")) and not list(checkpoint.glob("*.bin"))
    before = listing(checkpoint)

    target = tmp_path / "exported"
    done = cli("export", run_dir.name, "--checkpoint", "12", "--to", str(target))
    assert "consolidated the FSDP-sharded" in done.stdout and "checkpoint-12" in done.stdout
    names = {p.name for p in target.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.model", "README.md"} <= names
    kind, exported = logits(target)
    _, expected = logits(tmp_path / "reference")
    _, final = logits(out)
    diff = float((exported - expected).abs().max())
    print(f"exported vs FSDP-gathered reference: max |logit diff| {diff}")
    assert kind == "LlamaForCausalLM" and diff <= LOGIT_TOL
    assert float((exported - final).abs().max()) > 1e-3  # the shards' weights, not the final's
    # nothing written into the run's checkpoint, no temporary folder left beside the target
    assert listing(checkpoint) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    said = json.loads(
        cli("chat", run_dir.name, "--checkpoint", "12", "--prompt", "Hi", "--json").stdout
    )
    assert said["consolidated"] is True and said["model"] == str(checkpoint)
    assert said["turns"][0]["reply"].strip()
    assert listing(checkpoint) == before

    # served: consolidated once into RUN/serve/, the worker loads that, the checkpoint untouched
    port = free_port()
    cli("serve", run_dir.name, "--checkpoint", "12", "--detach", "--port", str(port),
        "--device", "cpu")  # fmt: skip
    try:
        answer = ask(port, run_dir.name)
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        workers = [c for c in cmdlines() if b"fastchat.serve.model_worker" in c]
        served = str(run_dir / "serve" / "consolidated-checkpoint-12").encode()
        assert any(served + b"\0" in c for c in workers), workers
        assert (run_dir / "serve" / "consolidated-checkpoint-12" / "config.json").is_file()
    finally:
        cli("stop", run_dir.name)
    nothing_left(run_dir)
    assert listing(checkpoint) == before

    # incomplete checkpoints: refused before any worker starts, naming the checkpoint
    unmarked = out / "checkpoint-13"
    shutil.copytree(checkpoint, unmarked)
    (unmarked / MARKER).unlink()
    no_meta = out / "checkpoint-14"
    shutil.copytree(checkpoint, no_meta)
    (no_meta / "pytorch_model_fsdp_0" / ".metadata").unlink()
    for step, why in ((13, MARKER), (14, ".metadata")):
        for command in (["export", "--to", str(tmp_path / f"x{step}")], ["chat", "--prompt", "x"]):
            proc = cli(
                command[0], run_dir.name, "--checkpoint", str(step), *command[1:], check=False
            )
            assert proc.returncode == 2, proc.stderr
            assert f"checkpoint-{step}" in proc.stderr and why in proc.stderr, proc.stderr
    assert not (tmp_path / "x13").exists() and not (tmp_path / "x14").exists()
    # a shard cut short (the metadata is there): consolidate.py refuses it, exit 2, by name
    cut = out / "checkpoint-15"
    shutil.copytree(checkpoint, cut)
    shard = next((cut / "pytorch_model_fsdp_0").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    proc = cli(
        "export", run_dir.name, "--checkpoint", "15", "--to", str(tmp_path / "x15"), check=False
    )
    assert proc.returncode == 2 and "checkpoint-15" in proc.stderr and shard.name in proc.stderr
    assert not (tmp_path / "x15").exists()
    proc = cli("chat", run_dir.name, "--checkpoint", "15", "--prompt", "x", check=False)
    assert proc.returncode == 2 and "checkpoint-15" in proc.stderr and shard.name in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
