"""A cap on the trainer's address space, so that a host out-of-memory is real on a small machine.

A sibling of ``train_entry.py`` (standard library only). With ``TRAINWIZ_TRAIN_AS_HEADROOM_MB=N``
in the environment the entry lets its address space grow by at most N MiB once training starts
(``RLIMIT_AS`` = what is mapped then + N MiB). An allocation past it fails the way a full host
fails: torch's ``DefaultCPUAllocator: can't allocate memory`` or Python's ``MemoryError``. The
OOM fallback's tests use it to make a large candidate really run out of host memory while a
smaller one fits; nobody needs it in production (``ulimit -v`` does the same for a whole shell).
"""

import os
import resource

ENV = "TRAINWIZ_TRAIN_AS_HEADROOM_MB"


def mapped_bytes():
    """VmSize of this process (bytes), from /proc/self/status."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def apply(log):
    """Cap the address space when ``ENV`` asks for it; returns the limit in bytes (or None)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        headroom = int(raw) << 20
    except ValueError:
        raise SystemExit(f"{ENV}={raw!r}: give the headroom in MiB, e.g. 512") from None
    used = mapped_bytes()
    limit = used + headroom
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    log(
        f"address space capped at {limit >> 20} MiB ({raw} MiB above the {used >> 20} MiB mapped; {ENV})"
    )
    return limit
