"""Resume verifies a checkpoint before choosing it (docs/checkpoints.md): a damaged newest
checkpoint (a truncated safetensors file, a missing or unparsable trainer_state.json, a truncated
optimizer.pt, an FSDP shard folder without its metadata) is skipped with its reason and the
previous complete one is chosen, by the CLI and by the entry alike; a ``checkpoint-N`` symlink is
never followed out of the run. Checkpoints are built by hand from small files: no training."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.entry import ENTRY_DIR
from backend.entry import checkpoints as ck
from backend.rundir import read_status
from backend.runs.resume import latest_checkpoint, prepare_resume, read_attempts, run_attempts
from tests.run_records import make_ended_run
from tui.cli import main


def write_safetensors(path: Path, *, cut: int = 0) -> None:
    """A valid safetensors file (8-byte little-endian header length, JSON header, data), less
    its last ``cut`` bytes."""
    header = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
    }
    raw = json.dumps(header).encode()
    blob = struct.pack("<Q", len(raw)) + raw + b"\0" * 12
    path.write_bytes(blob[: len(blob) - cut])


def write_torch_zip(path: Path, *, cut: int = 0) -> None:
    """What torch.save writes (a zip archive), less its last ``cut`` bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/data/0", b"\0" * 64)
    blob = buffer.getvalue()
    path.write_bytes(blob[: len(blob) - cut])


def make_checkpoint(out: Path, step: int) -> Path:
    """checkpoint-STEP as the entry leaves it: weights, optimizer, training args, trainer state
    and trainwiz's completeness marker."""
    path = out / f"checkpoint-{step}"
    path.mkdir(parents=True)
    write_safetensors(path / "model.safetensors")
    write_torch_zip(path / "optimizer.pt")
    write_torch_zip(path / "training_args.bin")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    ck.write_marker(path, {"step": step})
    return path


def _no_metadata(path: Path) -> None:
    shards = path / "pytorch_model_fsdp_0"
    shards.mkdir()
    (shards / "__0_0.distcp").write_bytes(b"x" * 32)


# (damage done to checkpoint-20 after its marker was written, words its reason must hold)
DAMAGE: dict[str, tuple[Callable[[Path], object], str]] = {
    "truncated safetensors": (
        lambda p: write_safetensors(p / "model.safetensors", cut=3),
        "model.safetensors",
    ),
    "safetensors cut inside its header": (
        lambda p: (p / "model.safetensors").write_bytes(b"\x40\0\0\0"),
        "model.safetensors",
    ),
    "missing trainer_state.json": (
        lambda p: (p / "trainer_state.json").unlink(),
        "trainer_state.json",
    ),
    "unparsable trainer_state.json": (
        lambda p: (p / "trainer_state.json").write_text('{"global_step": 2'),
        "trainer_state.json",
    ),
    "trainer_state.json of another step": (
        lambda p: (p / "trainer_state.json").write_text('{"global_step": 19}'),
        "19",
    ),
    "truncated optimizer.pt": (
        lambda p: write_torch_zip(p / "optimizer.pt", cut=10),
        "optimizer.pt",
    ),
    "empty training_args.bin": (
        lambda p: (p / "training_args.bin").write_bytes(b""),
        "training_args.bin",
    ),
    "FSDP shards without their metadata": (_no_metadata, "pytorch_model_fsdp_0"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_skipped_for_the_previous_one(
    kind: str, tmp_path: Path
) -> None:
    damage, words = DAMAGE[kind]
    good = make_checkpoint(tmp_path, 10)
    bad = make_checkpoint(tmp_path, 20)
    damage(bad)
    assert ck.checkpoint_problem(good, 10) is None
    choice = ck.resume_choice(tmp_path)
    assert choice.chosen == (10, good)
    [(step, path, why)] = choice.skipped
    assert (step, path) == (20, bad)
    assert words in why, why
    # The entry (training side) takes the same decision and says so in train.log.
    lines: list[str] = []
    assert ck.resume_point(str(tmp_path), lines.append) == str(good)
    assert any("checkpoint-20" in line and words in line for line in lines), lines


def test_intact_checkpoints_of_every_layout_pass(tmp_path: Path) -> None:
    full = make_checkpoint(tmp_path, 5)
    shards = full / "pytorch_model_fsdp_0"
    shards.mkdir()
    (shards / "__0_0.distcp").write_bytes(b"x" * 32)
    (shards / ".metadata").write_bytes(b"\x80\x04meta")
    (full / "rng_state.pth").write_bytes(b"\x80\x02legacy torch.save, not a zip")
    assert ck.checkpoint_problem(full, 5) is None
    assert ck.resume_choice(tmp_path).chosen == (5, full)
    assert ck.resume_choice(tmp_path).skipped == []


def test_a_symlink_out_of_the_run_is_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    good = make_checkpoint(out, 10)
    elsewhere = make_checkpoint(tmp_path / "elsewhere", 99999)  # complete and intact
    (out / "checkpoint-99999").symlink_to(elsewhere)
    choice = ck.resume_choice(out)
    assert choice.chosen == (10, good)
    [(step, _path, why)] = choice.skipped
    assert step == 99999 and "symbolic link" in why
    assert ck.complete_checkpoints(out) == [(10, good)]  # never listed, never rotated
    # ... nor a file in a checkpoint that leads out of it
    link = make_checkpoint(out, 20)
    (link / "optimizer.pt").unlink()
    (link / "optimizer.pt").symlink_to(elsewhere / "optimizer.pt")
    [(step, _path, why)] = [s for s in ck.resume_choice(out).skipped if s[0] == 20]
    assert "optimizer.pt" in why and "symbolic link" in why


def damaged_run(tmp_path: Path) -> Path:
    """A failed run whose newest checkpoint (20) has a truncated optimizer.pt."""
    run_dir = make_ended_run(tmp_path, "failed", None, preset="v", log="step 1\n")
    make_checkpoint(tmp_path / "out", 10)
    write_torch_zip(make_checkpoint(tmp_path / "out", 20) / "optimizer.pt", cut=10)
    return run_dir


def test_resume_falls_back_and_records_what_it_skipped(tmp_path: Path) -> None:
    run_dir = damaged_run(tmp_path)
    out = tmp_path / "out"
    assert latest_checkpoint(run_dir) == (10, out / "checkpoint-10")
    # one verification: the CLI's choice is the entry's
    assert ck.resume_point(str(out), lambda _line: None) == str(out / "checkpoint-10")
    record = prepare_resume(run_dir)
    assert record["resumed_from"] == 10
    [skipped] = record["skipped"]
    assert skipped["step"] == 20 and "optimizer.pt" in skipped["why"]
    message = read_status(run_dir).message
    assert "checkpoint-10" in message and "checkpoint-20" in message
    # The watcher takes the pending attempt and says it in train.log (no training: a stub).
    log = io.BytesIO()
    code = run_attempts(run_dir, {}, log, lambda _spec: 0, lambda _code: ("finished", "done"))
    assert code == 0
    [started] = [a for a in read_attempts(run_dir) if a["attempt"] == 2]
    assert started["resumed_from"] == 10 and started["skipped"] == record["skipped"]
    assert "attempt 2: checkpoint-20 skipped: optimizer.pt" in log.getvalue().decode()


def test_the_cli_names_the_skipped_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tui.commands.resume as command

    run_dir = damaged_run(tmp_path)
    monkeypatch.setattr(command, "resume", prepare_resume)  # records it; starts no watcher
    assert main(["resume", str(run_dir), "--detach"]) == 0
    shown = capsys.readouterr().out
    assert "from step 10" in shown
    assert "checkpoint-20" in shown and "optimizer.pt" in shown


def test_the_entry_side_stays_stdlib_only() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(ENTRY_DIR)!r}); import checkpoints; "
        "assert not {'torch', 'transformers', 'safetensors'} & set(sys.modules), 'heavy import'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
