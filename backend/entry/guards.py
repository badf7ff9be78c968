"""Guards of the training entry: stop on a non-finite loss, keep metrics.jsonl valid JSON.

A sibling of ``train_entry.py`` (copied with it into each run dir; standard library only). A loss
or grad norm that is NaN or infinite never recovers: training on would burn the GPUs for a run
that reports "finished". The entry raises NonFiniteLoss, prints one line with the phrase
"non-finite loss" (the diagnosis category ``loss_nan`` matches it), writes an ``end`` line with
``reason: loss_nan`` and exits non-zero. Metrics lines are written whole or not at all: JSON has
no NaN, so a non-finite number is written as null, and a line a full disk cut short is removed.
"""

import math
import os

REASON = "loss_nan"
EXIT_CODE = 3


class NonFiniteLoss(Exception):
    """The loss (or grad norm) is NaN or infinite: the run is stopped."""


def _bad(value):
    return isinstance(value, (int, float)) and not math.isfinite(value)


def check_logs(logs, step):
    """Raise NonFiniteLoss when the Trainer's log values at ``step`` are not finite."""
    bad = {k: logs[k] for k in ("loss", "grad_norm") if _bad(logs.get(k))}
    if bad:
        values = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise NonFiniteLoss(
            f"non-finite loss at step {step} ({values}): stopping the run; lower "
            "training.learning_rate or check the data"
        )


def json_safe(value):
    """``value`` with every NaN/inf float replaced by None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def end_fields(exc):
    """The ``end`` line's error fields for the exception that ended training."""
    if isinstance(exc, NonFiniteLoss):
        return {"error": str(exc), "reason": REASON}
    return {"error": repr(exc)}


def append_line(fd, line):
    """Append one whole line to the O_APPEND ``fd``; on a short write or error truncate it back,
    so a reader never sees half an object."""
    data = line.encode("utf-8")
    before = os.fstat(fd).st_size
    try:
        written = os.write(fd, data)
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError:
        try:
            os.ftruncate(fd, before)
        except OSError:
            pass
        raise
