"""The self-contained training entry that torchrun runs inside a run directory.

``train_entry.py`` is never imported by the wizard (it imports torch, transformers and fastchat):
the launcher copies it, with every sibling module of this folder (packing, checkpoints, ...),
into ``<run_dir>/entry/`` so a run keeps the exact entry it started with. The entry imports its
siblings as top-level modules: torchrun puts the script's folder first on ``sys.path``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ENTRY_DIR = Path(__file__).resolve().parent
ENTRY_SOURCE = ENTRY_DIR / "train_entry.py"


def entry_modules() -> list[Path]:
    """The files a run needs: the entry and its sibling modules (never this package marker)."""
    return sorted(p for p in ENTRY_DIR.glob("*.py") if p.name != "__init__.py")


def copy_entry(run_dir: Path) -> Path:
    """Copy the entry and its siblings into ``run_dir/entry/``; return the entry's path."""
    target_dir = run_dir / "entry"
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target_dir.chmod(0o700)  # run files are the user's alone (mkdir's mode obeys the umask)
    for module in entry_modules():
        shutil.copy2(module, target_dir / module.name)
        (target_dir / module.name).chmod(0o600)
    return target_dir / ENTRY_SOURCE.name
