"""The strict base every preset section shares (unknown keys are errors, values are checked)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

from backend.preset.grammar import (
    MAX_TEXT,
    check_plain_text,
)

SCHEMA_VERSION = 1
BIG = 10**9  # upper bound of step/count fields: far past any real run, far below overflow


class _Strict(BaseModel):
    """Unknown keys are errors (with a "did you mean" from the loader), never silently dropped.

    Every text field is one line of printable text (``description`` may span lines) of at most
    ``MAX_TEXT`` characters, and every float is finite: values end up in argv, plans, Dockerfiles
    and logs, where a newline, NUL, escape sequence or lone surrogate does harm and never good.
    """

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        allow_inf_nan=False,
        str_max_length=MAX_TEXT,
    )

    @field_validator("*", mode="after")
    @classmethod
    def _plain_text(cls, value: Any, info: ValidationInfo) -> Any:
        return check_plain_text(value, multiline=info.field_name == "description")
