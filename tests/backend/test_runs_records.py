"""Run records on a full disk and the entry's metrics guards, on a real (tiny) tmpfs.

Root is needed to mount the tmpfs (CI runs as root); elsewhere these tests skip saying so.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from backend.entry import ENTRY_DIR
from backend.rundir import (
    RESERVE,
    STATUS,
    DiskFull,
    create_run_dir,
    read_status,
    update_status,
)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs these tests as root)")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as handle:
        chunk = b"\0" * 65536
        while chunk:
            try:
                handle.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                chunk = chunk[: len(chunk) // 2]


@pytest.fixture
def guards() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tw_guards", ENTRY_DIR / "guards.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_status_survives_a_full_disk_through_the_reserve(
    tiny_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tiny_fs))
    run_dir = create_run_dir("p", "host")
    assert (run_dir / RESERVE).stat().st_size > 0
    fill(tiny_fs / "filler")
    update_status(run_dir, state="failed", message="disk full", cause="disk_full")
    assert not (run_dir / RESERVE).exists()  # spent on this write
    assert read_status(run_dir).cause == "disk_full"
    # No reserve left and still full: the write fails, the last good record stays whole.
    fill(tiny_fs / "filler-2")
    with pytest.raises(DiskFull):
        update_status(run_dir, message="x" * 200_000)
    assert read_status(run_dir).message == "disk full"
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(f".{STATUS}")] == []


def test_no_run_dir_is_left_when_the_disk_is_full(
    tiny_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tiny_fs))
    (tiny_fs / "runs").mkdir()
    fill(tiny_fs / "filler")
    with pytest.raises(DiskFull, match="disk full"):
        create_run_dir("p", "host")
    assert list((tiny_fs / "runs").iterdir()) == []


def test_a_metrics_line_is_never_left_half_written(tiny_fs: Path, guards: ModuleType) -> None:
    path = tiny_fs / "metrics.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    guards.append_line(fd, json.dumps({"kind": "start"}) + "\n")
    fill(tiny_fs / "filler")
    before = path.read_bytes()
    with pytest.raises(OSError):  # the first page still has room: a short write, then ENOSPC
        guards.append_line(fd, json.dumps({"kind": "step", "pad": "x" * 20000}) + "\n")
    os.close(fd)
    assert path.read_bytes() == before


def test_non_finite_values_become_null_and_stop_the_run(guards: ModuleType) -> None:
    record = {"loss": float("nan"), "grad_norm": float("inf"), "mem": [1.0, float("-inf")]}
    assert json.dumps(guards.json_safe(record), allow_nan=False) == (
        '{"loss": null, "grad_norm": null, "mem": [1.0, null]}'
    )
    guards.check_logs({"loss": 2.0, "grad_norm": 0.5}, 1)
    with pytest.raises(guards.NonFiniteLoss, match="non-finite loss at step 7"):
        guards.check_logs({"loss": 2.0, "grad_norm": float("nan")}, 7)
    fields = guards.end_fields(guards.NonFiniteLoss("non-finite loss at step 7"))
    assert fields["reason"] == "loss_nan"
