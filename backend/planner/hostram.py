"""Host RAM the plan must stay within: given (``--host-ram GIB``) or read from this machine.

A configuration that fits the GPU can still be killed by the host's OOM killer (CPU offload
keeps ~16 bytes per parameter on the host; every rank loads fp32 weights first): tune never
picks one predicted to exceed it.
"""

from __future__ import annotations

from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.units import GIB


def read_meminfo(path: str | Path = "/proc/meminfo") -> int | None:
    """MemTotal in bytes, or None where there is no /proc/meminfo."""
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_ram_for(given_gib: float | None, gpu_name: str | None) -> int | None:
    """``--host-ram`` in bytes; else this machine's RAM when the plan is for its own GPU."""
    if given_gib is not None:
        if given_gib <= 0:
            raise BadInput(
                _("--host-ram {given_gib}: give the host's RAM in GiB, e.g. 128").format(
                    given_gib=given_gib
                )
            )
        return int(given_gib * GIB)
    if gpu_name is None:
        return read_meminfo()
    return None
