"""The strict base every preset section shares (unknown keys are errors, values are checked)."""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

from backend.i18n import _
from backend.preset.grammar import (
    MAX_TEXT,
    check_plain_text,
)


def _scalar_kinds(annotation: Any) -> set[type]:
    """{bool}, {int}, {int, float}... for a field typed with those (Optional stripped); an
    empty set for anything else (text, lists, models, Literals)."""
    args = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    parts = [a for a in args if a is not type(None)] if args else [annotation]
    kinds = {p for p in parts if p in (bool, int, float)}
    return kinds if len(kinds) == len(parts) else set()


_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
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

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        """A switch is true or false, a count is a number: 'yes' is not true and true is not 1
        (pydantic's lax mode would take both, and a typo would change what the run does)."""
        field = cls.model_fields.get(info.field_name or "")
        if field is None or value is None:
            return value
        kinds = _scalar_kinds(field.annotation)
        if kinds == {bool} and not isinstance(value, bool):
            raise ValueError(_("must be true or false, not {value!r}").format(value=value))
        if bool in kinds:
            return value
        if kinds & {int, float} and isinstance(value, bool):
            raise ValueError(_("must be a number, not {value}").format(value=str(value).lower()))
        # YAML 1.1 reads 2e-5 as text: a float field takes a number written that way, an
        # integer field takes no text at all.
        numeric_text = float in kinds and bool(_FLOAT_TEXT.fullmatch(str(value).strip()))
        if kinds and kinds <= {int, float} and isinstance(value, str) and not numeric_text:
            raise ValueError(_("must be a number, not the text {value!r}").format(value=value[:40]))
        if kinds == {int} and isinstance(value, float):
            raise ValueError(_("must be a whole number, not {value!r}").format(value=value))
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _plain_text(cls, value: Any, info: ValidationInfo) -> Any:
        return check_plain_text(value, multiline=info.field_name == "description")
