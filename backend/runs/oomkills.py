"""Was a SIGKILLed trainer killed by the kernel's OOM killer, or by someone's ``kill -9``?

The log cannot tell: torchrun reports ``exitcode: -9`` either way, and the classifier reads that
as host_oom (the usual cause). The kernel can: ``/proc/vmstat`` counts every OOM kill, the
cgroup (container) ones included, host-wide. An attempt records the counter when it starts and
when it ends; a SIGKILL while the counter stood still was not the OOM killer, so the attempt's
cause, the OOM fallback and ``trainwiz diagnose`` say "killed from outside" instead (single-node
runs only: another node's kernel is not read here).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from backend.i18n import N_, _

VMSTAT = Path("/proc/vmstat")
MEMINFO = Path("/proc/meminfo")
KILLED_CATEGORY = "killed"
# The host_oom signatures of an allocation that failed are memory errors whatever the counter.
_ALLOCATION = re.compile(r"DefaultCPUAllocator|MemoryError|Errno 12")
KILLED_TITLE = N_("A training process was killed (SIGKILL), but not by the kernel's OOM killer")


def oom_kill_count(path: Path = VMSTAT) -> int | None:
    """The kernel's OOM kills since boot (None: not readable here)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def mem_available_mib(path: Path = MEMINFO) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def at_start() -> dict[str, Any]:
    """Fields an attempt's record keeps from its start."""
    return {"oom_kills_at_start": oom_kill_count()}


def at_end() -> dict[str, Any]:
    return {"oom_kills_at_end": oom_kill_count(), "mem_available_mib": mem_available_mib()}


def no_oom_kill(record: dict[str, Any]) -> bool:
    """True when the attempt's record proves the kernel killed nothing while it ran."""
    start, end = record.get("oom_kills_at_start"), record.get("oom_kills_at_end")
    return isinstance(start, int) and isinstance(end, int) and end == start


def explanation(record: dict[str, Any]) -> str:
    free = record.get("mem_available_mib")
    ram = _(", with {mib} MiB of RAM available at its end").format(mib=free) if free else ""
    return _(
        "The kernel's OOM-kill counter (/proc/vmstat oom_kill) did not change while this "
        "attempt ran{ram}: something else sent SIGKILL (a kill -9, a scheduler, a watchdog). "
        "Nothing in the preset needs to change for memory."
    ).format(ram=ram)


def relabel_findings(findings: list[Any], record: dict[str, Any] | None) -> None:
    """Turn the log's SIGKILL host_oom findings into ``killed`` ones when ``record`` (the
    run's last attempt) shows no OOM kill; an allocation failure stays host_oom."""
    if not record or not no_oom_kill(record):
        return
    for finding in findings:
        if finding.category == "host_oom" and not _ALLOCATION.search(finding.text or ""):
            finding.category = KILLED_CATEGORY
            finding.title = _(KILLED_TITLE)
            finding.explanation = explanation(record)
            finding.fixes = [fix for fix in finding.fixes if not fix.changes]
