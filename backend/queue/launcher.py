"""``python -m backend.queue.launcher ITEM_ID``: one queued item's launch, in its own process.

Why a process of its own and not a call inside the scheduler: ``launch`` writes the run
directory and waits for the watcher's answer; a scheduler killed in the middle would leave a
half-made run marked "launcher died". This process is in its own session, so it finishes the
launch whatever happens to the scheduler, and it carries ``TRAINWIZ_QUEUE_ITEM=<token>`` in its
environment (as the watcher and the training it starts do): a scheduler that restarts finds it
by that marker and waits for it instead of launching the item again.

The result is written whole to ``queue/items/<id>.result.json``: the run id, or the refusal's
lines and exit code (2: bad input, 1: a failure), as the CLI would have said them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backend.atomicfile import write_json
from backend.errors import BadInput, TrainwizError
from backend.preset.loader import load_preset
from backend.queue import db
from backend.runs.launch import launch

MARKER = "TRAINWIZ_QUEUE_ITEM"


def result_path(item_id: int) -> Path:
    return db.queue_dir() / "items" / f"{item_id}.result.json"


def run_item(item_id: int) -> dict[str, Any]:
    """Launch the item's preset copy; the result record (also written to ``result_path``)."""
    conn = db.connect()
    try:
        item = db.item(conn, item_id)
    finally:
        conn.close()
    if item is None:
        return {"ok": False, "code": 2, "error": f"queue item {item_id} is not in queue.db"}
    try:
        preset = load_preset(item.preset_file)
        result = launch(preset, ignore_plan=item.ignore_plan, ref=item.preset_file)
    except BadInput as exc:
        return {"ok": False, "code": 2, "error": "; ".join(exc.problems)}
    except TrainwizError as exc:
        return {"ok": False, "code": 1, "error": str(exc)}
    except Exception as exc:  # the scheduler records it; a traceback is in the item's log
        return {"ok": False, "code": 1, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "code": 0, "run_id": result.run_id, "notes": result.notes}


def main(argv: list[str]) -> int:
    item_id = int(argv[0])
    record = run_item(item_id)
    write_json(result_path(item_id), record)
    print(record, flush=True)
    return int(record["code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
