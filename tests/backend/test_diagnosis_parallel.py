"""A big log split over worker processes gives the findings one sequential scan gives."""

from __future__ import annotations

import io
import itertools
import random
from pathlib import Path

import pytest

from backend.diagnosis import diagnose_file, diagnose_stream
from backend.diagnosis import parallel as par

CORPUS3 = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus3"
BENIGN = [
    "{'loss': 1.3491, 'grad_norm': 0.83, 'learning_rate': 1.2e-05, 'epoch': 0.98}\n",
    " 45%|████▌     | 450/1000 [10:01<12:13,  1.33s/it]\r 45%|████▌     | 451/1000 [10:02<12:12]\n",
    "node1:97:183 [0] NCCL INFO Channel 00/02 :    0   1   2   3\n",
    "Epoch 1, Step 3, Loss: 0.9670:   3%|▎         | 5/144 [00:07<03:42,  1.60s/it]\n",
]


def _log(path: Path) -> Path:
    """~3 MiB of healthy lines with real failure excerpts of every kind spread through it."""
    failures = sorted(p for p in CORPUS3.glob("*/*.log") if p.parent.name != "benign")
    rng = random.Random(7)
    with path.open("w", encoding="utf-8") as handle:
        for failure in failures[::3]:
            handle.write("".join(rng.choice(BENIGN) for _ in range(1200)))
            handle.write(failure.read_text(encoding="utf-8"))
        handle.write("".join(rng.choice(BENIGN) for _ in range(500)))
    return path


def _shape(path: Path, findings: list) -> list[tuple]:  # type: ignore[type-arg]
    return [(f.category, f.severity, f.line, f.lines, f.count, f.text, f.nodes) for f in findings]


@pytest.mark.parametrize("jobs", [2, 5])
def test_parts_scanned_in_processes_give_the_sequential_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    log = _log(tmp_path / "big.log")
    data = log.read_bytes()
    sequential = diagnose_stream(io.BytesIO(data), total=len(data))
    monkeypatch.setattr(par, "PARALLEL_MIN", 1 << 20)
    monkeypatch.setattr(par, "PART_MIN", 256 << 10)
    monkeypatch.setenv("TRAINWIZ_DIAGNOSE_JOBS", str(jobs))
    assert par.jobs_for(len(data)) == jobs
    seen: list[int] = []
    split = diagnose_file(log, progress=lambda done, total: seen.append(done))
    assert len(sequential.findings) >= 10
    assert _shape(log, split.findings) == _shape(log, sequential.findings)
    assert (split.lines_read, split.bytes_read) == (sequential.lines_read, len(data))
    assert seen[-1] == len(data) and len(seen) == jobs


def test_cuts_start_at_line_starts_and_cover_the_file(tmp_path: Path) -> None:
    log = _log(tmp_path / "big.log")
    data = log.read_bytes()
    ranges = par.cuts(log, len(data), 7)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(data[start - 1 : start] == b"\n" for start, _ in ranges[1:])


def test_small_logs_and_one_job_stay_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert par.jobs_for(10 << 20) == 1
    monkeypatch.setattr(par.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert par.jobs_for(4 << 30) == 1  # a saturated box: the CPUs are not idle
    monkeypatch.setattr(par.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(par, "_idle_cpus", lambda: 16)
    assert par.jobs_for(4 << 30) == par.MAX_JOBS and par.jobs_for(1 << 30) == 4
    assert par.jobs_for(300 << 20) == 1  # a worker costs what it saves below 512 MiB
    monkeypatch.setenv("TRAINWIZ_DIAGNOSE_JOBS", "1")
    assert par.jobs_for(4 << 30) == 1
    monkeypatch.setenv("TRAINWIZ_DIAGNOSE_JOBS", "4")
    assert par.jobs_for(4 << 30) == 4
