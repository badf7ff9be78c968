"""The wizard's step ids, as plain literals: a leaf every layer may name steps with.

The step table (``backend.steps``) is above the checks that block its steps, so the ids live
here, below both; ``backend.steps`` asserts its table matches them.
"""

from __future__ import annotations

from typing import Literal

StepId = Literal["checks", "model", "image", "hyperparams", "launch", "monitor"]
STEP_IDS: tuple[StepId, ...] = ("checks", "model", "image", "hyperparams", "launch", "monitor")
# The steps whose action (download, pull/build, launch) a failed check may hold back.
BLOCKABLE: tuple[StepId, ...] = ("model", "image", "launch")
