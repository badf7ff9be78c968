"""The processes of a multi-node run on every node, so ``stop`` says how many it ended there.

A run's processes are found by the run directory in their command line: the torchrun agents,
their trainers (``<run>/entry/train_entry.py``, each in a session of its own, so a process
group does not hold them) and the GPU samplers (``<run>/entry/gpusampler.py``) all name it.

- **SSH**: one ssh call per distinct host lists them (several "nodes" on one host are counted
  once).
- **Slurm**: while the job runs, ``srun --overlap`` in its allocation lists them on each of the
  job's nodes. After ``scancel`` Slurm's process tracking has ended every process of the job;
  what is left is looked for on this machine (which is one of the job's nodes on a one-host
  cluster), and is what ``left`` reports.

The lister never counts itself: the pattern is put together from two shell variables, so no
command line holds it whole but the run's own.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

from backend import subproc
from backend.procinfo import find_processes


def lister(run_dir: Path | str) -> str:
    """Shell text printing ``HOST PID`` for each process whose command line names the run."""
    head, tail = str(run_dir), "/entry/"
    return (
        f"a={shlex.quote(head)}; b={shlex.quote(tail)}; h=$(hostname); "
        'for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" = "$$" ] && continue; '
        'c=$(tr "\\0" " " < "$p/cmdline" 2>/dev/null) || continue; '
        'case "$c" in *"$a$b"*) echo "$h $n";; esac; done'
    )


def _parse(out: str) -> set[tuple[str, int]]:
    found = set()
    for line in out.splitlines():
        host, _, pid = line.strip().partition(" ")
        if pid.isdigit():
            found.add((host, int(pid)))
    return found


def local(run_dir: Path | str) -> set[tuple[str, int]]:
    """This machine's processes of the run (no shell: /proc directly)."""
    needle = (str(run_dir) + "/entry/").encode()
    host = os.uname().nodename
    return {(host, p.pid) for p in find_processes(cmdline=needle)}


def over_ssh(run_dir: Path | str, nodes: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """Every node's processes of the run, one ssh call per distinct host, in parallel."""
    seen: dict[str, list[str]] = {}
    for node in nodes:
        if node.get("ssh"):
            seen.setdefault(str(node.get("host")).rsplit(":", 1)[0], node["ssh"])
    calls = [
        subproc.spawn([*ssh, lister(run_dir)], stderr=subprocess.DEVNULL) for ssh in seen.values()
    ]
    found: set[tuple[str, int]] = set()
    for call in calls:
        try:
            out, _ = call.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            subproc.signal_group(call, signal.SIGKILL)  # the client and its ProxyCommand
            call.wait()
            continue
        found |= _parse(out)
    return found


def in_slurm_job(run_dir: Path | str, job_id: str, nnodes: int) -> set[tuple[str, int]]:
    """The job's processes on each of its nodes (``srun --overlap`` in its allocation)."""
    argv = ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={nnodes}"]
    argv += ["--ntasks-per-node=1", "--quiet", "bash", "-c", lister(run_dir)]
    done = subproc.probe(argv, 60)
    return set() if done.error is not None else _parse(done.stdout)
