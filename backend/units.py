"""One place for how trainwiz writes sizes and durations (as nvitop keeps one formatting module):
the checks, the Model step and the CLI's download line all print a GiB or an ETA the same way."""

from __future__ import annotations


def human(n: float) -> str:
    """Binary units, as df and free print them: ``512 B``, ``1.5 KiB`` … ``2.0 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def clock(seconds: float | None) -> str:
    """An ETA as a clock: ``4:05``, ``1:02:03``; ``--:--`` when unknown."""
    if seconds is None:
        return "--:--"
    s = int(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )
