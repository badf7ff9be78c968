"""One OpenMP thread for the tiny CPU trainings that do not inherit the suite's environment.

tests/conftest.py sets ``OMP_NUM_THREADS=1`` for everything a test starts, but a container's
environment comes from the preset and an SSH node's from its sshd, so those trainings ran two
OpenMP threads on this 2-core machine, which spin-wait against the suite's other work. Measured
(a 3-step tiny run beside two busy processes): 5.6 CPU-s with two threads, 3.7 with one; idle,
one thread is as fast for these tiny models. The preset's own ``launch.env`` carries it, as a
user would set it."""

from __future__ import annotations

from typing import Any


def one_thread(launch: dict[str, Any]) -> dict[str, Any]:
    """``launch`` (a preset's launch section) with OMP_NUM_THREADS=1 in its env."""
    env = dict(launch.get("env") or {})
    env.setdefault("OMP_NUM_THREADS", "1")
    launch["env"] = env
    return launch
