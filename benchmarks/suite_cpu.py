"""Where the suite's CPU goes: samples every process twice a second while a command runs.

Why: the pytest phase is CPU-bound on two cores (98 % busy), so only fewer CPU-seconds make it
shorter, and most of them are spent in child processes (trainings, torchrun, the CLI, the
wizard under tmux, Docker) that pytest's own timings do not see. Each process's user+system
time since it was first seen goes to a label: the test named in its environment
(``PYTEST_CURRENT_TEST``, inherited by what a test starts), else that of its nearest live
ancestor, else a summary of its command line (``python train_entry.py``, ``xdist-worker``,
``trainwiz``...). Processes that start and end between two samples are missed (the CLI's
~0.3 CPU-s runs mostly are), and a detached run whose environment was rebuilt keeps no test id.

Usage: ``python benchmarks/suite_cpu.py OUT.json -- bash .ci/run`` (any command); OUT.json
holds {label: CPU-seconds}; the largest labels are printed at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from backend.procinfo import stat_fields

TICK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.5


def summary(pid: int) -> str:
    try:
        argv = [
            a.decode(errors="replace")
            for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if a
        ]
    except OSError:
        return "?"
    if not argv:
        return "(no command line)"
    joined = " ".join(argv)
    if "exec(eval(sys.stdin" in joined:
        return "xdist-worker"
    base = os.path.basename(argv[0])
    for arg in argv[1:]:
        name = os.path.basename(arg)
        if arg.endswith(".py") or name in ("trainwiz", "torchrun"):
            return f"{base} {name}"
    if "-m" in argv[:-1]:
        return f"{base} -m {argv[argv.index('-m') + 1]}"
    return f"{base} -c" if "-c" in argv else base


def own_test(pid: int) -> str | None:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"PYTEST_CURRENT_TEST="):
                return "test " + item.split(b"=", 1)[1].decode(errors="replace").rsplit(" (", 1)[0]
    except OSError:
        pass
    return None


def label(
    pid: int,
    stats: dict[int, list[str]],
    parent: dict[int, int],
    labels: dict[tuple[int, str], str],
    depth: int = 0,
) -> str | None:
    """The process's test, else its nearest live ancestor's, else its command line's summary."""
    if pid not in stats or depth > 30:
        return None
    key = (pid, stats[pid][19])
    if key not in labels:
        found = own_test(pid)
        if found is None:
            above = label(parent.get(pid, 0), stats, parent, labels, depth + 1)
            found = above if above and above.startswith("test ") else summary(pid)
        labels[key] = found
    return labels[key]


def sample(totals: dict[str, float], stop: threading.Event) -> None:
    last: dict[tuple[int, str], float] = {}
    labels: dict[tuple[int, str], str] = {}
    first, me = True, os.getpid()
    while not stop.is_set():
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                fields = stat_fields(int(entry))
                if fields is not None:
                    stats[int(entry)] = fields
        parent = {pid: int(fields[1]) for pid, fields in stats.items()}

        seen = set()
        for pid, fields in stats.items():
            key = (pid, fields[19])
            seen.add(key)
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            name = label(pid, stats, parent, labels)
            if key not in last:
                last[key] = cpu if first else 0.0
            if name is not None and cpu > last[key]:
                totals[name] = totals.get(name, 0.0) + cpu - last[key]
                last[key] = cpu
        for key in set(last) - seen:
            last.pop(key)
            labels.pop(key, None)
        first = False
        stop.wait(PERIOD_S)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: suite_cpu.py OUT.json -- COMMAND...", file=sys.stderr)
        return 2
    out, command = Path(argv[0]), argv[2:]
    totals: dict[str, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(totals, stop), daemon=True)
    sampler.start()
    started = time.monotonic()
    code = subprocess.call(command)
    stop.set()
    sampler.join()
    out.write_text(json.dumps(dict(sorted(totals.items(), key=lambda kv: -kv[1])), indent=0))
    print(f"{sum(totals.values()):.0f} CPU-s sampled in {time.monotonic() - started:.0f} s")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{seconds:8.1f}  {name}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
