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
from backend.preset.schema import Preset
from backend.preset.yamlsafe import MAX_PRESET_BYTES, compose_and_construct, decode_preset_bytes

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
        return f"; did you mean '{close[0]}'?"
    return f"; known keys: {', '.join(sorted(names))}"


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
    return out or "(top level)"


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
        for _, _, node, err in located[:MAX_PROBLEMS]
    ]
    if len(located) > MAX_PROBLEMS:
        shown.append(f"{source}: ... and {len(located) - MAX_PROBLEMS} more problems")
    return shown


def _message(err: dict[str, Any]) -> str:
    loc, kind = err["loc"], err["type"]
    if kind == "extra_forbidden":
        return (
            f"unknown key '{_short(loc[-1]) if len(str(loc[-1])) > 60 else loc[-1]}'{_suggest(loc)}"
        )
    if kind == "missing":
        return f"required key '{loc[-1]}' is missing"
    message = str(err["msg"]).removeprefix("Value error, ")
    if "input" in err and kind not in ("model_type",) and not isinstance(err["input"], dict):
        message += f" (got {_short(err['input'])})"
    return message


MAX_PROBLEMS = 30  # a hostile preset must not print megabytes of errors
MAX_SHOWN_INPUT = 120


def _short(value: Any) -> str:
    """The offending input as the user typed it, cut short and with secrets hidden."""
    from backend.redact import redact_text

    text = redact_text(repr(value))
    if len(text) > MAX_SHOWN_INPUT:
        text = text[:MAX_SHOWN_INPUT] + f"... ({len(text):,} characters)"
    return text


def parse_preset_text(text: str, source: str = "<preset>") -> Preset:
    """Parse YAML text into a Preset, raising BadInput listing every problem."""
    if len(text) > MAX_PRESET_BYTES:
        raise BadInput(f"{source}: {len(text):,} characters is larger than a preset can be")
    try:
        root, data = compose_and_construct(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"{where} (yaml): {problem}: fix the YAML syntax") from exc
    if not isinstance(data, dict):
        raise BadInput(
            f"{source}:1:1 (top level): a preset is a mapping of keys (schema, name, ...)"
        )
    schema = data.get("schema")
    if schema is not None and schema != 1:
        node = _node_at(root, ("schema",))
        raise BadInput(
            f"{_where(source, node)} schema: version {schema!r} is not supported; this trainwiz reads schema 1"
        )
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, root, source)) from exc


def resolve_preset_path(name_or_path: str) -> Path:
    """A path as given, or a shipped preset by name (with or without .yaml)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, not a preset file: name a .yaml file in it")
    if os.path.lexists(path) and not os.path.exists(path):
        raise BadInput(f"{path}: a symbolic link that leads nowhere (dangling or a loop)")
    shipped = SHIPPED_DIR / (
        name_or_path if name_or_path.endswith(".yaml") else f"{name_or_path}.yaml"
    )
    if shipped.is_file():
        return shipped
    known = ", ".join(p.stem for p in sorted(SHIPPED_DIR.glob("*.yaml")) if p.stem != "images")
    raise BadInput(f"preset '{name_or_path}': no such file or shipped preset (shipped: {known})")


def load_preset(name_or_path: str | Path) -> Preset:
    path = resolve_preset_path(str(name_or_path))
    try:
        with path.open("rb") as handle:  # read one byte past the limit, never the whole file
            raw = handle.read(MAX_PRESET_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_PRESET_BYTES:
        raise BadInput(
            f"{path}: larger than a preset can be ({MAX_PRESET_BYTES:,} bytes): "
            "is this the right file?"
        )
    return parse_preset_text(decode_preset_bytes(raw, str(path)), source=str(path))


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
    """(name, description) of each shipped preset."""
    out = []
    for path in sorted(SHIPPED_DIR.glob("*.yaml")):
        if path.stem == "images":
            continue
        preset = load_preset(path)
        out.append((preset.name, preset.description.splitlines()[0] if preset.description else ""))
    return out
