"""The training side imports its stack with Python's cyclic GC paused, then freezes what the
imports made (backend/entry/importgc.py): measured on the CPU stack, a tiny training's entry took
7.2-7.4 CPU-s instead of 8.5-8.9, on every rank of every run. Each script is imported in a
process of its own with a spy on the import system that notes whether the collector ran when
torch and transformers were first imported (and, for the chat/export worker,
where its first step imports them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.entry import ENTRY_DIR
from backend.results import worker

SPY = """
import gc, json, sys
seen = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "transformers", "transformers.trainer") and name not in seen:
            seen[name] = gc.isenabled()
        return None
sys.meta_path.insert(0, Spy())
sys.path.insert(0, sys.argv[1])
module = __import__(sys.argv[2])
if len(sys.argv) > 3:
    getattr(module, sys.argv[3])()
print(json.dumps({"seen": seen, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


WORKER = Path(worker.__file__)


@pytest.mark.parametrize(
    ("folder", "script"),
    [(ENTRY_DIR, ["train_entry"]), (ENTRY_DIR, ["fastchat_entry"]),
     (WORKER.parent, ["worker", "import_stack"])],  # chat and export: the worker's first step
    ids=["train_entry", "fastchat_entry", "results-worker"],
)  # fmt: skip
def test_the_stack_imports_with_the_collector_paused_then_it_runs_again(
    folder: Path, script: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SPY, str(folder), *script],
        capture_output=True, text=True, timeout=120, cwd=folder,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    trainer = {} if script[0] == "worker" else {"transformers.trainer": False}
    assert out["seen"] == {"torch": False, "transformers": False, **trainer}
    assert out["enabled"] is True  # the run's own objects are collected as usual
    assert out["frozen"] > 50_000  # the import-time objects are out of the collector's scans
