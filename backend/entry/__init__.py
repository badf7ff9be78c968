"""The self-contained training entry that torchrun runs inside a run directory.

``train_entry.py`` is never imported by the wizard (it imports torch, transformers and fastchat):
the launcher copies it into ``<run_dir>/entry/`` so a run keeps the exact entry it started with.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ENTRY_SOURCE = Path(__file__).resolve().parent / "train_entry.py"


def copy_entry(run_dir: Path) -> Path:
    """Copy the entry into ``run_dir/entry/train_entry.py`` and return that path."""
    target = run_dir / "entry" / "train_entry.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ENTRY_SOURCE, target)
    return target
