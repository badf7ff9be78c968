#!/usr/bin/env python
"""How fast this machine runs the suite's commonest work today, printed in the CI log.

The suite is CPU-bound (its trainings, CLI calls and servers keep both cores busy), so its wall
time follows the machine's speed, and a shared host's speed changes from day to day: the same
commit's pytest phase took 720 s on one day and 2,096 s on another. Two fixed workloads, timed
in CPU-seconds of a child process, make two CI logs comparable: a pure-Python loop (the
interpreter) and ``import torch`` (what every training, torchrun and worker process starts
with). Each is run three times and the fastest is printed (the least disturbed by neighbours).

    python scripts/machine_speed.py
"""

from __future__ import annotations

import resource
import subprocess
import sys

LOOP = "sum(i * i for i in range(10**7))"
TRIES = 3


def child_cpu_seconds(argv: list[str]) -> float:
    """User + system CPU-seconds of one run of ``argv`` (a child process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fastest(argv: list[str]) -> float:
    return min(child_cpu_seconds(argv) for _ in range(TRIES))


def main() -> int:
    loop = fastest([sys.executable, "-c", LOOP])
    try:
        torch = f"{fastest([sys.executable, '-c', 'import torch']):.2f} CPU-s"
    except (OSError, subprocess.CalledProcessError):
        torch = "not installed"
    print(f"== machine speed (fastest of {TRIES}): a pure-Python loop {loop:.2f} CPU-s,"
          f" import torch {torch}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
