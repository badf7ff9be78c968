"""Real failures, provoked here and never seen before: the logs come from the real torchrun
launcher and the real HfArgumentParser in subprocesses (the wizard process never imports torch or
transformers), so the signatures are checked against what the mechanisms print today."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from backend.diagnosis import diagnose_file, diagnose_text
from backend.diagnosis.fixes import free_port

pytestmark = pytest.mark.slow  # each case starts torch in a subprocess (~3 CPU-seconds)


def _torchrun(script: Path, port: int, log: Path) -> int:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
            "--master_port", str(port), str(script)]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, timeout=240, check=False
        ).returncode


@pytest.mark.parametrize(
    ("signal_name", "category"),
    [("SIGBUS", "shm"), ("SIGKILL", "host_oom")],
)
def test_worker_killed_by_signal(tmp_path: Path, signal_name: str, category: str) -> None:
    script = tmp_path / "worker.py"
    script.write_text(f"import os, signal\nos.kill(os.getpid(), signal.{signal_name})\n")
    log = tmp_path / "train.log"
    assert _torchrun(script, free_port(), log) != 0
    top = diagnose_file(log).top
    assert top is not None and top.category == category, log.read_text()[-2000:]


def test_rendezvous_port_taken(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text("print('never reached')\n")
    log = tmp_path / "train.log"
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        assert _torchrun(script, holder.getsockname()[1], log) != 0
    top = diagnose_file(log).top
    assert top is not None and top.category == "port_in_use", log.read_text()[-2000:]


def test_transformers_rejects_the_old_eval_flag() -> None:
    code = (
        "from transformers import HfArgumentParser, TrainingArguments\n"
        "HfArgumentParser(TrainingArguments).parse_args_into_dataclasses("
        "['--output_dir', 'out', '--evaluation_strategy', 'steps'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip
    assert proc.returncode != 0
    top = diagnose_text(proc.stdout + proc.stderr).top
    assert top is not None and top.category == "hf_args", proc.stderr[-2000:]
    assert "eval_strategy" in top.fixes[0].title
