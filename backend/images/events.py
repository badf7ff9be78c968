"""Progress events the image/env work sends to its ``progress`` callback (one positional arg)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogLine:
    """One line of build or pip output, as printed."""

    text: str


@dataclass(frozen=True)
class BuildStep:
    """The builder moved to a Dockerfile step ('Step 4/9 : RUN ...')."""

    index: int
    total: int
    instruction: str


@dataclass(frozen=True)
class LayerProgress:
    """A pulled layer's state ('Downloading', 'Extracting', 'Pull complete') and bytes."""

    layer: str
    status: str
    current: int | None = None
    total: int | None = None
