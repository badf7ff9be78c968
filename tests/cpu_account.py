"""Opt-in pytest plugin: the CPU-seconds each test cost, its children and detached runs included.

    python -m pytest -p tests.cpu_account -n 4 --dist loadgroup   (as root, cgroup v1 cpuacct)

The suite is CPU-bound on two cores, so its wall time is the sum of what its tests burn, and
most of that burns outside the test's own process: torchrun, the entry, servers, a detached run
that outlives the test. Each test runs with its worker moved into a cgroup of its own; every
process started meanwhile is born there and stays there, so the cgroup's ``cpuacct.usage`` at
the end of the session is everything that test set going (Docker containers run under dockerd's
cgroup and are not counted). Written to ``$TRAINWIZ_CPU_ACCOUNT`` (default
``cpu-by-test.jsonl``): one line per test, ``{"test", "cpu_s", "wall_s"}``; read it with
``python tests/cpu_account.py FILE``. Not loaded by the suite itself: a measuring tool.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_groups: list[tuple[str, Path, float]] = []


def _move(group: Path) -> None:
    (group / "cgroup.procs").write_text(str(os.getpid()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not (CPUACCT / "cgroup.procs").exists():
        yield
        return
    group = CPUACCT / f"trainwiz-test-{os.getpid()}-{len(_groups)}"
    group.mkdir()
    _move(group)
    started = time.monotonic()
    try:
        yield
    finally:
        _move(CPUACCT)
        _groups.append((item.nodeid, group, time.monotonic() - started))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _groups:
        return
    out = Path(os.environ.get("TRAINWIZ_CPU_ACCOUNT", "cpu-by-test.jsonl"))
    with out.open("a", encoding="utf-8") as fh:
        for nodeid, group, wall in _groups:
            cpu_s = int((group / "cpuacct.usage").read_text()) / 1e9
            fh.write(json.dumps({"test": nodeid, "cpu_s": round(cpu_s, 2),
                                 "wall_s": round(wall, 2)}) + "\n")  # fmt: skip
            try:
                group.rmdir()  # only when nothing it started still runs
            except OSError:
                pass


def summary(path: str) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by_folder: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    for row in rows:
        file = row["test"].split("::")[0]
        by_file[file] += row["cpu_s"]
        by_folder[file.split("/")[1] if "/" in file else file] += row["cpu_s"]
    print(f"{len(rows)} tests, {sum(by_folder.values()):.0f} CPU-s")
    for name, cpu in by_folder.most_common():
        print(f"{cpu:8.0f}  {name}")
    print()
    for name, cpu in by_file.most_common(40):
        print(f"{cpu:8.0f}  {name}")
    print()
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:40]:
        print(f"{row['cpu_s']:8.1f}  {row['wall_s']:7.1f}  {row['test']}")


if __name__ == "__main__":
    summary(sys.argv[1] if len(sys.argv) > 1 else "cpu-by-test.jsonl")
