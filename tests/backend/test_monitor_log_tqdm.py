"""The Monitor's log pane on what tqdm really writes during a training with evals: the eval bar
(position 1, leave=False, as HF's ProgressCallback makes it) moves the cursor with ``\\n`` and
``ESC[A`` and clears itself with spaces; none of that may show as log lines, and each line the
user sees appears once, numbered as an editor numbers it."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from backend.monitor import LogFollower, LogModel, classify_batch

WRITER = r"""
import sys
from tqdm import tqdm
f = open(sys.argv[1], "w")
bar = tqdm(total=4, file=f, mininterval=0, dynamic_ncols=True)
for i in range(4):
    bar.update(1)
    if i == 1:
        bar.write("{'loss': 1.5, 'epoch': 0.5}", file=f)
        ev = tqdm(total=3, file=f, leave=False, mininterval=0, dynamic_ncols=True)
        for j in range(3):
            ev.update(1)
        ev.close()
        f.write("{'eval_loss': 1.2}\n")
bar.close()
f.write("model saved\n")
"""


def test_tqdm_eval_bars_leave_no_fragments_or_repeated_lines(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    subprocess.run([sys.executable, "-c", WRITER, str(log)], check=True, timeout=60)
    raw = log.read_bytes().decode()
    assert "\x1b[A" in raw  # the real thing: tqdm moved the cursor up
    batches = []
    LogFollower(log, batches.append).run(threading.Event(), follow=False)
    model = LogModel()
    for batch in batches:
        model.add(classify_batch(batch, None))
    texts = [line.text for line in model.lines]
    assert texts == ["{'loss': 1.5, 'epoch': 0.5}", "{'eval_loss': 1.2}", "model saved"], texts
    numbers = [line.no for line in model.lines]
    assert numbers == sorted(set(numbers))  # no number twice
    physical = raw.split("\n")
    assert all(line.text in physical[line.no - 1] for line in model.lines)
    assert model.progress is not None and "4/4" in model.progress
    assert "\x1b" not in model.progress
