"""Load and save presets, reporting every problem as ``file:line:col field.path: message``.

YAML is composed into nodes first so each pydantic error location can be traced back to the
line and column where the user wrote it; unknown keys get a "did you mean" from the schema's
own field names. Saving writes only what the preset sets, atomically, and reloads equal.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from backend.errors import BadInput
from backend.i18n import N_, SOURCE_LANGUAGE, _, current_language
from backend.preset.schema import Preset
from backend.preset.schema_notify import HOST_FILES
from backend.preset.yamlsafe import MAX_PRESET_BYTES, compose_and_construct, decode_preset_bytes
from backend.redact import redact_text

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "presets"


def _node_at(root: yaml.Node | None, loc: tuple[int | str, ...]) -> yaml.Node | None:
    """The deepest YAML node along ``loc`` (keys for mappings, indexes for sequences)."""
    node = root
    deepest = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if key_node.value == part:
                    found = value_node
                    break
            if found is None:
                return deepest
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return deepest
            node = node.value[part]
        else:
            return deepest
        deepest = node
    return deepest


def _key_node(root: yaml.Node | None, loc: tuple[int | str, ...]) -> yaml.Node | None:
    """The key node of the last element of ``loc`` (where an unknown key was typed)."""
    parent = _node_at(root, loc[:-1]) if len(loc) > 1 else root
    if isinstance(parent, yaml.MappingNode):
        for key_node, _ in parent.value:
            if key_node.value == loc[-1]:
                return key_node
    return None


def _model_for(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the field at ``loc[:-1]``."""
    model: type[BaseModel] = Preset
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = _field_by_name(model, str(part))
        if field is None:
            return None
        annotation = field.annotation
        inner = _first_model(annotation)
        if inner is None:
            return None
        model = inner
    return model


def _field_by_name(model: type[BaseModel], name: str) -> Any:
    for field_name, field in model.model_fields.items():
        if name in (field_name, field.alias):
            return field
    return None


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _suggest(loc: tuple[int | str, ...]) -> str:
    model = _model_for(loc)
    if model is None:
        return ""
    names = []
    for field_name, field in model.model_fields.items():
        names.append(field.alias or field_name)
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    if close:
        return _("; did you mean '{name}'?").format(name=close[0])
    return _("; known keys: {names}").format(names=", ".join(sorted(names)))


def _where(source: str, node: yaml.Node | None) -> str:
    if node is None:
        return f"{source}:1:1"
    mark = node.start_mark
    return f"{source}:{mark.line + 1}:{mark.column + 1}"


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and (len(part) > 60 or not part.isprintable()):
            part = _short(part)  # a hostile dict key: shown cut short and escaped
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or _("(top level)")


def format_validation_error(exc: ValidationError, root: yaml.Node | None, source: str) -> list[str]:
    """One ``file:line:col field: message`` line per pydantic error, in file order.

    Only the first ``MAX_PROBLEMS`` are worded (a "did you mean" costs a fuzzy match each)."""
    located: list[tuple[int, int, yaml.Node | None, dict[str, Any]]] = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        kind = err["type"]
        if kind == "extra_forbidden":
            node = _key_node(root, loc) or _node_at(root, loc)
        elif kind == "missing":
            node = _node_at(root, loc[:-1])
        else:
            node = _node_at(root, loc)
        line = node.start_mark.line if node is not None else 0
        col = node.start_mark.column if node is not None else 0
        located.append((line, col, node, {**err, "loc": loc}))
    located.sort(key=lambda item: (item[0], item[1]))
    shown = [
        f"{_where(source, node)} {_dotted(err['loc'])}: {_message(err)}"
        for _line, _col, node, err in located[:MAX_PROBLEMS]
    ]
    if len(located) > MAX_PROBLEMS:
        more = _("... and {count} more problems").format(count=len(located) - MAX_PROBLEMS)
        shown.append(f"{source}: {more}")
    return shown


def _message(err: dict[str, Any]) -> str:
    loc, kind = err["loc"], err["type"]
    if kind == "extra_forbidden":
        key = _short(loc[-1]) if len(str(loc[-1])) > 60 else loc[-1]
        return _("unknown key '{key}'").format(key=key) + _suggest(loc)
    if kind == "missing":
        return _("required key '{key}' is missing").format(key=loc[-1])
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind in PYDANTIC_MESSAGES and current_language() != SOURCE_LANGUAGE:
        # pydantic words its own checks in English: the common ones in the user's language
        ctx = {k: str(v) for k, v in (err.get("ctx") or {}).items()}
        try:
            message = _(PYDANTIC_MESSAGES[kind]).format(**ctx)
        except (KeyError, IndexError):
            pass  # a context this table does not know: pydantic's English stays
    if "input" in err and kind not in ("model_type",) and not isinstance(err["input"], dict):
        message += _(" (got {value})").format(value=_short(err["input"]))
    return message


# pydantic's error types whose English message is shown translated (its ctx fills the names).
PYDANTIC_MESSAGES: dict[str, str] = {
    "greater_than_equal": N_("Input should be greater than or equal to {ge}"),
    "greater_than": N_("Input should be greater than {gt}"),
    "less_than_equal": N_("Input should be less than or equal to {le}"),
    "less_than": N_("Input should be less than {lt}"),
    "int_parsing": N_("Input should be a valid integer"),
    "int_from_float": N_("Input should be a valid integer, got a number with a fractional part"),
    "int_type": N_("Input should be a valid integer"),
    "float_parsing": N_("Input should be a valid number"),
    "float_type": N_("Input should be a valid number"),
    "bool_parsing": N_("Input should be a valid boolean (true or false)"),
    "bool_type": N_("Input should be a valid boolean (true or false)"),
    "string_type": N_("Input should be a valid string"),
    "list_type": N_("Input should be a valid list"),
    "dict_type": N_("Input should be a valid dictionary"),
    "model_type": N_("Input should be a mapping of keys"),
    "literal_error": N_("Input should be {expected}"),
    "enum": N_("Input should be {expected}"),
}
MAX_PROBLEMS = 30  # a hostile preset must not print megabytes of errors
MAX_SHOWN_INPUT = 120
REDACT_MARGIN = 512  # past the cut: a secret straddling it is still recognised whole


def _short(value: Any) -> str:
    """The offending input as the user typed it, cut short and with secrets hidden.

    Only the start is redacted (with room past the cut for a secret that straddles it): a
    10 MB value used to be redacted whole, half a second per field, to show 120 characters."""
    text = repr(value)
    if len(text) <= MAX_SHOWN_INPUT:
        return redact_text(text)
    shown = redact_text(text[: MAX_SHOWN_INPUT + REDACT_MARGIN])[:MAX_SHOWN_INPUT]
    return shown + f"... ({len(text):,} characters)"


def parse_preset_text(text: str, source: str = "<preset>", *, host_files: bool = True) -> Preset:
    """Parse YAML text into a Preset, raising BadInput listing every problem.

    ``host_files``: also check the files it names on this host (``notify.ca_file``), as for a
    preset the user gives; a run's own record, read later or on another machine, is not."""
    if len(text) > MAX_PRESET_BYTES:
        raise BadInput(
            _("{source}: {count:,} characters is larger than a preset can be").format(
                source=source, count=len(text)
            )
        )
    try:
        root, data = compose_and_construct(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(
            _("{where} (yaml): {problem}: fix the YAML syntax").format(where=where, problem=problem)
        ) from exc
    if not isinstance(data, dict):
        raise BadInput(
            _("{source}:1:1 (top level): a preset is a mapping of keys (schema, name, ...)").format(
                source=source
            )
        )
    schema = data.get("schema")
    if schema is not None and schema != 1:
        node = _node_at(root, ("schema",))
        raise BadInput(
            _(
                "{where} schema: version {schema!r} is not supported; this trainwiz reads schema 1"
            ).format(where=_where(source, node), schema=schema)
        )
    try:
        return Preset.model_validate(data, context={HOST_FILES: host_files})
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, root, source)) from exc


def resolve_preset_path(name_or_path: str) -> Path:
    """A path as given, or a shipped preset by name (with or without .yaml)."""
    if not name_or_path.strip():  # an unset shell variable: Path('') is the current folder
        raise BadInput(_("preset: empty: name a shipped preset or a YAML file"))
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise BadInput(
            _("{path}: is a directory, not a preset file: name a .yaml file in it").format(
                path=path
            )
        )
    if os.path.lexists(path) and not os.path.exists(path):
        raise BadInput(
            _("{path}: a symbolic link that leads nowhere (dangling or a loop)").format(path=path)
        )
    shipped = SHIPPED_DIR / (
        name_or_path if name_or_path.endswith(".yaml") else f"{name_or_path}.yaml"
    )
    if shipped.is_file():
        return shipped
    known = ", ".join(p.stem for p in sorted(SHIPPED_DIR.glob("*.yaml")) if p.stem != "images")
    raise BadInput(
        _("preset '{name_or_path}': no such file or shipped preset (shipped: {known})").format(
            name_or_path=name_or_path, known=known
        )
    )


def load_preset(name_or_path: str | Path, *, host_files: bool = True) -> Preset:
    """A preset by name or path (``host_files``: see :func:`parse_preset_text`)."""
    path = resolve_preset_path(str(name_or_path))
    try:
        with path.open("rb") as handle:  # read one byte past the limit, never the whole file
            raw = handle.read(MAX_PRESET_BYTES + 1)
    except OSError as exc:
        raise BadInput(
            _("{path}: cannot read: {value}").format(path=path, value=exc.strerror or exc)
        ) from exc
    if len(raw) > MAX_PRESET_BYTES:
        raise BadInput(
            _(
                "{path}: larger than a preset can be ({MAX_PRESET_BYTES:,} bytes): is this the "
                "right file?"
            ).format(path=path, MAX_PRESET_BYTES=MAX_PRESET_BYTES)
        )
    text = decode_preset_bytes(raw, str(path))
    return parse_preset_text(text, source=str(path), host_files=host_files)


def preset_to_yaml(preset: Preset) -> str:
    """YAML of what the preset sets (defaults left implicit), keys in schema order."""
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    data = {"schema": 1, **{k: v for k, v in data.items() if k != "schema"}}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def save_preset(preset: Preset, path: str | Path) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves half a preset."""
    target = Path(path).expanduser()
    text = preset_to_yaml(preset)
    parse_preset_text(text, source=str(target))  # never write what would not load back
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def list_shipped() -> list[tuple[str, str]]:
    """(name, description) of each shipped preset: the ones that run here with no GPU and no
    download (the embedded default, ``tiny-*``) first, then the rest by name."""
    out = []
    paths = sorted(
        SHIPPED_DIR.glob("*.yaml"), key=lambda p: (not p.stem.startswith("tiny-"), p.stem)
    )
    for path in paths:
        if path.stem == "images":
            continue
        preset = load_preset(path)
        out.append((preset.name, preset.description.splitlines()[0] if preset.description else ""))
    return out
