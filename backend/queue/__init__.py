"""The run queue and hyperparameter sweeps (docs/queue.md).

A queued item is a preset waiting for its GPUs (or, on the CPU, for a free slot of
``max_parallel``); one detached scheduler per TRAINWIZ_HOME starts each item through the normal
launch (``backend.runs.launch``) when it can run, and records how it ended. The state is one
SQLite database (``queue.db``) so that a ``kill -9`` of the scheduler or a reboot loses no item
and starts none twice. A sweep is a grid of preset variants queued together and ranked by a
metric once they ran.

This package sits above ``backend.runs`` (it launches and diagnoses runs) and
``backend.results`` (a sweep is ranked with compare's figures).
"""
