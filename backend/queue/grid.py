"""A sweep's variants: ``--set path=v1,v2`` axes, their grid (or a sample of it), and one
preset per combination, each validated by the preset schema before anything is written.

Why validate every variant first: a typo in the third value of a 3x2 grid used to surface as
the fifth run failing an hour later. Here ``--set training.learning_rate=1e-5,abc`` is refused
at once (exit 2) naming the variant and the field, as the loader names them (file:line:col),
and no file is written and nothing queued.

A variant's preset is the base preset as it sets its fields (``preset_to_yaml``) with the
variant's values put in at their dotted paths, and named after its values
(``tiny-cpu-learning_rate-1e-5``) so its runs say which variant they are.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from backend.errors import BadInput
from backend.i18n import _
from backend.preset.loader import parse_preset_text, preset_to_yaml
from backend.preset.schema import Preset

MAX_VARIANTS = 256
STEM_MAX = 72  # a variant's file stem; the preset name adds the base name and the queue token
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_FIXED = ("schema", "name")  # every variant's own


@dataclass(frozen=True)
class Axis:
    path: str  # dotted preset path, e.g. training.learning_rate
    texts: tuple[str, ...]  # the values as typed


@dataclass
class Variant:
    label: str  # "learning_rate=1e-5 lora_r=8"
    stem: str  # its file's name without .yaml: "learning_rate-1e-5_lora_r-8"
    overrides: dict[str, str]  # dotted path -> value as typed
    text: str  # the variant's preset YAML
    preset: Preset


def parse_set(text: str) -> Axis:
    """``training.learning_rate=1e-5,2e-5`` as an axis; BadInput naming ``--set`` otherwise."""
    if not text.strip():
        raise BadInput(_("--set is empty: write a dotted preset field and its values, e.g. --set "
                         "training.learning_rate=1e-5,2e-5"))  # fmt: skip
    path, sep, values = text.partition("=")
    path = path.strip()
    if not sep or not _PATH.match(path) or path.split(".")[0] in _FIXED:
        raise BadInput(
            _(
                "--set {text}: write a dotted preset path and its values, e.g. --set "
                "training.learning_rate=1e-5,2e-5"
            ).format(text=text[:80])
        )
    texts = tuple(v.strip() for v in values.split(","))
    if not all(texts):
        raise BadInput(_("--set {path}: an empty value: separate the values by single commas")
                       .format(path=path))  # fmt: skip
    if len(set(texts)) != len(texts):
        raise BadInput(_("--set {path}: a value is given twice").format(path=path))
    return Axis(path, texts)


def parse_value(text: str) -> Any:
    """A value as typed: a number (``1e-5`` too, which YAML 1.1 reads as a string), true/false/
    null, else the text (YAML's reading of it)."""
    if _NUMBER.match(text):
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def combinations(axes: list[Axis], samples: int | None = None,
                 seed: int = 0) -> list[tuple[tuple[str, str], ...]]:  # fmt: skip
    """Every combination in grid order, or ``samples`` of them drawn with ``seed`` (kept in
    grid order, so the same command gives the same variants)."""
    paths = [a.path for a in axes]
    if len(set(paths)) != len(paths):
        raise BadInput(_("--set: a path is given twice: put all its values in one --set"))
    grid = list(itertools.product(*[[(a.path, t) for t in a.texts] for a in axes]))
    if samples is not None and samples < len(grid):
        keep = sorted(random.Random(seed).sample(range(len(grid)), samples))
        grid = [grid[i] for i in keep]
    if len(grid) > MAX_VARIANTS:
        raise BadInput(
            _(
                "the grid has {count} variants, more than {limit}: pass --samples N to draw N of "
                "them"
            ).format(count=len(grid), limit=MAX_VARIANTS)
        )
    return grid


def _short_names(paths: list[str]) -> dict[str, str]:
    """Each path's last part, or the whole path where two axes share their last part."""
    lasts = [p.rsplit(".", 1)[-1] for p in paths]
    return {p: (last if lasts.count(last) == 1 else p) for p, last in zip(paths, lasts)}


def _stem(pairs: list[tuple[str, str]]) -> str:
    stem = "_".join(f"{k}-{re.sub(r'[^A-Za-z0-9.-]+', '_', v)}" for k, v in pairs).strip("._-")
    if len(stem) > STEM_MAX:
        digest = hashlib.sha1(stem.encode()).hexdigest()[:8]
        stem = f"{stem[: STEM_MAX - 9].rstrip('._-')}-{digest}"
    return stem or "variant"


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise BadInput(_("--set {path}: {part} is not a section of the preset").format(
                path=path, part=part))  # fmt: skip
        node = child
    node[parts[-1]] = value


def build_variants(base: Preset, combos: list[tuple[tuple[str, str], ...]],
                   folder: Path) -> list[Variant]:  # fmt: skip
    """Each combination as a validated preset; BadInput listing every variant's problems."""
    start = yaml.safe_load(preset_to_yaml(base))
    short = _short_names([path for path, _text in combos[0]]) if combos else {}
    variants, problems = [], []
    for combo in combos:
        pairs = [(short[path], text) for path, text in combo]
        label = " ".join(f"{k}={v}" for k, v in pairs)
        stem = _stem(pairs)
        data = copy.deepcopy(start)
        data["name"] = f"{base.name[:24].rstrip('._-')}-{stem}"[:84].rstrip("._-")
        try:
            for path, text in combo:
                _put(data, path, parse_value(text))
            text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
            preset = parse_preset_text(text, source=str(folder / f"{stem}.yaml"))
        except BadInput as exc:
            problems += [
                _("sweep variant {label}: {problem}").format(label=label, problem=p)
                for p in exc.problems
            ]
            continue
        variants.append(Variant(label, stem, dict(combo), text, preset))
    if problems:
        raise BadInput(problems)
    return variants
