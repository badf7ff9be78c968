"""Hostile strings in every text field: refused cleanly, or planned as a script that runs nothing.

For each shape of preset (tests/security/hostile.py) and every text slot the schema has, each
payload is either refused by validation (a short, bounded message naming the field) or the
printed plan is pasted into ``env -i bash -c "$plan"`` in an empty temp dir whose PATH holds only
stub recorders: no marker file may appear, and the stubs must receive exactly the argv of each
step (so quoting kept every value one word and in place). ``bash -n`` checks the syntax too.
"""

from __future__ import annotations

import collections
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import ValidationError

from backend.errors import BadInput
from backend.plan import build_plan
from backend.preset.loader import format_validation_error
from backend.preset.schema import Preset
from backend.redact import redact_argv
from tests.security.hostile import BASES, MARK, NUMBERS, PAYLOADS, cases, place, slots

STUB = """#!/bin/sh
{ printf '%s\\037' "${0##*/}" "$@"; printf '\\036'; } >> "$STUB_LOG"
"""
# The same recorder as shell functions, defined before the pasted plan: no fork per command,
# so hundreds of plans run in seconds. Names not defined here still only find the PATH stubs.
RECORD = """_rec() { { printf '%s\\037' "$@"; printf '\\036'; } >> "$STUB_LOG"; }\n"""


def _stub_dir(root: Path, names: set[str]) -> Path:
    stubs = root / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in names:
        path = stubs / name
        path.write_text(STUB)
        path.chmod(0o755)
    return stubs


def _recorded(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    text = log.read_text(encoding="utf-8", errors="surrogateescape")
    return [rec.split("\x1f")[:-1] for rec in text.split("\x1e") if rec]


def _run_pasted(
    script: str, workdir: Path, stubs: Path, functions: bool = False
) -> list[list[str]]:
    """The plan pasted into a clean shell (``env -i``, PATH = stubs): only recorders can run.

    ``bash -n`` first checks the plan's syntax on its own, then the same text runs.
    """
    log = workdir / "calls.log"
    prefix = ""
    if functions:
        names = sorted(p.name for p in stubs.iterdir())
        prefix = RECORD + "".join(f'{n}() {{ _rec {n} "$@"; }}\n' for n in names)
    driver = (
        'bash -n -c "$PLAN" || { echo "SYNTAX ERROR" >&2; exit 99; }; '
        'exec /usr/bin/env -i PATH="$STUBS" STUB_LOG="$LOG" /bin/bash -c "$PREFIX$PLAN"'
    )
    done = subprocess.run(
        ["/bin/bash", "-c", driver],
        cwd=workdir,
        env={
            "PLAN": script,
            "PREFIX": prefix,
            "STUBS": str(stubs),
            "LOG": str(log),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 99, done.stderr
    return _recorded(log)


@pytest.mark.slow
def test_every_text_field_payload_is_refused_or_planned_inert(tmp_path: Path) -> None:
    tried: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    scripts: dict[str, list[list[str]]] = {}
    for _base, slot, payload_name, _payload, data in cases():
        tried[payload_name] += 1
        try:
            preset = Preset.model_validate(data)
        except ValidationError as exc:
            refused[payload_name] += 1
            lines = format_validation_error(exc, None, "p.yaml")
            assert lines and len(lines) <= 31, (slot.dotted(), lines[:3])
            assert all(len(line) < 1200 for line in lines), (slot.dotted(), payload_name)
            assert any(str(slot.path[0]) in line for line in lines), (slot.dotted(), lines)
            continue
        try:
            plan = build_plan(preset)
        except BadInput as exc:  # refused while planning (e.g. by the image plan): also clean
            refused[payload_name] += 1
            assert all(len(line) < 1200 for line in exc.problems), slot.dotted()
            continue
        plan.to_json()  # serialisable whatever the values
        # A step another one runs (the container's command) is a comment: it runs once.
        expected = [redact_argv(s.shown_argv()) for s in plan.steps if not s.included_in]
        scripts.setdefault(plan.as_script(), expected)
    names = {argv[0] for expected in scripts.values() for argv in expected}
    stubs = _stub_dir(tmp_path, names)

    def paste(index: int, script: str) -> tuple[list[str], list[list[str]]]:
        workdir = tmp_path / f"w{index}"
        workdir.mkdir()
        calls = _run_pasted(script, workdir, stubs, functions=True)
        return [p.name for p in workdir.iterdir() if p.name.startswith(MARK)], calls

    with ThreadPoolExecutor(max_workers=4) as pool:  # the shells run in parallel
        results = list(pool.map(paste, range(len(scripts)), scripts))
    for (script, expected), (injected, calls) in zip(scripts.items(), results, strict=True):
        assert not injected, script
        assert calls == expected, script
    # Every payload was tried in every slot of every base, and some were planned, not refused.
    assert set(tried) == set(PAYLOADS)
    assert len(scripts) > 100
    for always_refused in ("ten_mb", "nul", "non_utf8", "escape_osc", "carriage_return"):
        assert refused[always_refused] == tried[always_refused], always_refused
    assert refused["newline"] == tried["newline"] - len(BASES)  # only description spans lines
    report = {k: (tried[k], refused[k]) for k in sorted(tried)}
    print(
        f"\nhostile plan cases (tried, refused) per payload: {report}; scripts run: {len(scripts)}"
    )


def test_newline_is_refused_in_every_single_line_field() -> None:
    """Only ``description`` may span lines; a newline anywhere else is a clear error."""
    base = BASES["hf-docker-image"]
    for slot in slots():
        if slot.kind == "number" or slot.path == ("description",):
            continue
        data = place(base, slot, "a\nb")
        if data is None:
            continue
        with pytest.raises(ValidationError) as caught:
            Preset.model_validate(data)
        assert str(slot.path[-1]) in str(caught.value), slot.dotted()


@pytest.mark.parametrize("number", sorted(NUMBERS))
def test_every_numeric_field_has_bounds(number: str) -> None:
    """10**30, -10**30, -100, nan and inf are refused by every int/float field of the schema."""
    value = NUMBERS[number]
    checked = 0
    for slot in slots():
        if slot.kind != "number":
            continue
        data = place(BASES["hf-docker-image"], slot, value)
        assert data is not None
        with pytest.raises(ValidationError):
            Preset.model_validate(data)
        checked += 1
    assert checked >= 30


def test_max_steps_minus_one_still_means_unset() -> None:
    data = place(BASES["local-host"], next(s for s in slots() if s.path[-1] == "max_steps"), -1)
    assert data is not None and Preset.model_validate(data).training.max_steps == -1


def test_plan_script_escapes_newlines_in_titles_and_env_keys(tmp_path: Path) -> None:
    """Even values that bypass validation (model_construct) cannot break out of the script."""
    from backend.plan.commands import PlanStep

    preset = Preset.model_validate(BASES["local-host"])
    plan = build_plan(preset)
    plan.steps.append(
        PlanStep(
            id="x",
            group="g",
            title=f"title\necho > {MARK}title",
            note=f"note\necho > {MARK}note",
            argv=["trainwiz", f"a\necho > {MARK}argv", "b\x00c"],
            env={f"K=1 echo > {MARK}key; X": "v", "OK": f"$(echo > {MARK}val)"},
        )
    )
    script = plan.as_script()
    stubs = _stub_dir(tmp_path, {"trainwiz", "huggingface-cli", "torchrun", "env"})
    calls = _run_pasted(script, tmp_path, stubs)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(MARK)]
    assert calls[-1][0] == "env"  # a non-name key goes through env(1), as one quoted word
    assert f"K=1 echo > {MARK}key; X=<redacted>" in calls[-1]
    assert script.count("\n# [g] title\\necho") == 1


def test_plan_cli_transformers_must_be_a_version(capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main

    assert main(["plan", "tiny-cpu", "--transformers", "notaversion"]) == 2
    assert "--transformers: 'notaversion' is not a version" in capsys.readouterr().err
    assert main(["launch", "tiny-cpu", "--transformers", "notaversion", "--detach"]) == 2
    assert "--transformers: 'notaversion' is not a version" in capsys.readouterr().err
    runs = Path(os.environ["TRAINWIZ_HOME"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir())
