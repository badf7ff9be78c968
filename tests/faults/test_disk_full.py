"""Fill the disk under a live run (TRAINWIZ_HOME on a 20 MB tmpfs, filled by the test).

Every command must still answer, no record may be torn, the record must say "disk full", and
after space is freed it must still say so (not "exit code unknown").
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.helpers import (
    assert_nothing_left,
    cli,
    end_runs,
    launch_detached,
    metric_lines,
    runs_json,
    short_preset,
    wait_final,
    wait_steps,
)

pytestmark = [pytest.mark.training, pytest.mark.slow]


@pytest.fixture
def small_home(tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs these tests as root)")
    home = tmp_path / "small-home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(home)], check=True)
    try:
        monkeypatch.setenv("TRAINWIZ_HOME", str(home))
        shutil.copytree(tiny_model, home / "models" / "tiny-llama")
        yield home
    finally:
        end_runs(home)
        subprocess.run(["umount", "-l", str(home)], check=False)


def fill(path: Path) -> None:
    """Write until the file system says ENOSPC."""
    with open(path, "wb", buffering=0) as handle:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


def test_full_disk_under_a_live_run_is_recorded_and_survived(
    small_home: Path, tmp_path: Path
) -> None:
    run_dir = launch_detached(short_preset(tmp_path, 5000))
    wait_steps(run_dir, 2)
    filler = small_home / "filler"
    fill(filler)
    final = wait_final(run_dir, 120)  # `runs --json` answers while the disk is full
    assert final["state"] == "failed"
    assert final["cause"] == "disk_full" and "disk full" in final["message"]
    assert_nothing_left(run_dir)
    for args in (("runs",), ("logs", run_dir.name), ("logs", "-f", run_dir.name)):
        out = cli(*args, timeout=30)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stderr)
    stop = cli("stop", run_dir.name)
    assert stop.returncode == 0 and "Traceback" not in stop.stderr, stop.stderr
    json.loads((run_dir / "status.json").read_text())  # never torn
    metric_lines(run_dir)  # every line whole and strict JSON: a cut last line fails here
    launch = cli("launch", str(short_preset(tmp_path, 2, name="tiny-more")), "--detach")
    assert launch.returncode != 0 and "Traceback" not in launch.stderr
    assert "disk full" in launch.stderr or "No space" in launch.stderr
    assert sorted(p.name for p in (small_home / "runs").iterdir() if p.name[0] != ".") == [
        run_dir.name
    ]
    filler.unlink()
    after = runs_json()[run_dir.name]
    assert after["state"] == "failed" and "disk full" in after["message"]
