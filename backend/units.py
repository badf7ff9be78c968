"""One place for how trainwiz writes sizes and durations (as nvitop keeps one formatting module):
the checks, the Model step and the CLI's download line all print a GiB or an ETA the same way."""

from __future__ import annotations

GIB = 1024**3


def human(n: float) -> str:
    """Binary units, as df and free print them: ``512 B``, ``1.5 KiB`` … ``2.0 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def gib(n: float, digits: int = 2) -> float:
    """Bytes as GiB, rounded: the figure a plan, a record or a sentence carries."""
    return round(n / GIB, digits)


def download_size(n: int) -> str:
    """A download's size: GiB with two decimals from a quarter GiB, else MiB with one (the
    Model step's and the CLI's progress line, where a shard's last MiB matter)."""
    return f"{n / GIB:.2f} GiB" if n >= GIB // 4 else f"{n / 2**20:.1f} MiB"


def gib_column(n: int) -> str:
    """GiB right-aligned in six characters, two decimals: the plan's memory table."""
    return f"{n / GIB:6.2f} GiB"


def clock(seconds: float | None) -> str:
    """An ETA as a clock: ``4:05``, ``1:02:03``; ``--:--`` when unknown."""
    if seconds is None:
        return "--:--"
    s = int(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def duration(seconds: float | None) -> str:
    """A duration in words: ``1h02m``, ``3m05s``, ``12s``; ``–`` when unknown."""
    if seconds is None:
        return "–"
    total = round(seconds)
    h, rem = divmod(total, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")
