"""Small helpers shared by the CLI command modules."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import BaseModel


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def print_json(payload: Any) -> None:
    """Print dataclasses / pydantic models / plain data as indented JSON."""
    print(json.dumps(to_jsonable(payload), indent=2, default=str))


def to_jsonable(obj: Any) -> Any:
    import dataclasses

    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
