"""`trainwiz data check`: every kind of record FastChat chokes on, by index; token statistics."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from backend.data.check import check_data
from backend.errors import BadInput
from backend.model.placeholders import SAMPLE_CONVERSATIONS
from tests.backend.test_model_validate import shared_tiny
from tui.cli import main


def turn(role: object, value: object) -> dict[str, object]:
    return {"from": role, "value": value}


GOOD = [turn("human", "What is two plus two?"), turn("gpt", "Two plus two is four.")]

# index -> (record, the issue kind expected at that index)
BAD: list[tuple[object, str]] = [
    ({"id": "r0", "conversations": GOOD}, ""),
    ({"id": "r1", "conversations": [turn("gpt", "hello"), *GOOD]}, "first_not_human"),
    ({"id": "r2", "conversations": [GOOD[0], GOOD[0]]}, "not_alternating"),
    ({"id": "r3", "conversations": [turn("system", "be nice"), *GOOD]}, "unknown_role"),
    ({"id": "r4", "conversations": [turn("human", "  "), GOOD[1]]}, "empty_value"),
    ({"id": "r5", "conversations": []}, "empty_conversations"),
    ({"id": "r6"}, "no_conversations"),
    (["not", "a", "record"], "not_object"),
    ({"id": "r8", "conversations": [GOOD[0], turn("gpt", 42)]}, "non_string_value"),
    ({"id": "r9", "conversations": [{"role": "user", "content": "hi"}]}, "bad_turn"),
    ({"id": "r0", "conversations": GOOD}, "duplicate_id"),
    ({"conversations": GOOD}, "missing_id"),
    ({"id": "r12", "conversations": [*GOOD, turn("human", "and three?")]}, "ends_with_human"),
]


@pytest.fixture()
def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([record for record, _ in BAD]))
    return path


def test_each_bad_kind_is_flagged_at_its_index(bad_file: Path) -> None:
    report = check_data(bad_file)
    found = {(i.index, i.kind) for i in report.issues}
    for index, (_, kind) in enumerate(BAD):
        if kind:
            assert (index, kind) in found, (index, kind)
    assert not any(i.index == 0 for i in report.issues)
    errors = {i.index for i in report.issues if i.severity == "error"}
    assert errors == {2, 3, 4, 5, 6, 7, 8, 9}
    assert not report.ok and report.n_records == len(BAD)
    line = next(i for i in report.issues if i.index == 3).line()
    assert line.startswith("record 3 (id r3): unknown_role") and "'system'" in line


def test_cli_data_check_json_and_exit_codes(
    bad_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "check", str(bad_file), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["errors"] == 8 and data["counts"]["unknown_role"] == 1
    assert main(["data", "check", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "dict.json").write_text('{"conversations": []}')
    assert main(["data", "check", str(tmp_path / "dict.json")]) == 2
    assert "needs a JSON list" in capsys.readouterr().err


@pytest.mark.slow
def test_token_stats_truncation_and_masked_records(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tiny = shared_tiny(tmp_path_factory)
    records = json.loads(SAMPLE_CONVERSATIONS.read_text())
    long_answer = " ".join(f"word{i}" for i in range(80))
    records.append({"id": "long", "conversations": [GOOD[0], turn("gpt", long_answer)]})
    records.append(BAD[12][0])  # unanswered last turn: FastChat's masking walk mismatches
    path = tmp_path / "d.json"
    path.write_text(json.dumps(records))
    report = check_data(path, tiny, max_length=200)
    t = report.tokens
    assert t is not None and t.n == 202 and t.tokenizer_class == "LlamaTokenizer"
    assert t.template_source == "fastchat"
    assert t.truncated_indexes == [200] and t.max > 200
    assert t.truncated_share == round(1 / 202, 4)
    assert t.mismatched_indexes == [201]
    assert not report.ok


def test_cli_sample_data_is_clean_with_tiny_tokenizer(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = shared_tiny(tmp_path_factory)
    assert main(["data", "check", "@sample", "--model", str(tiny), "--max-length", "256"]) == 0
    out = capsys.readouterr().out
    assert "records     200" in out and "truncated   0 of 200 (0.0%)" in out
    assert "mismatch" not in out


def test_training_python_without_transformers_is_reported(
    bad_file: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A real interpreter whose site-packages are switched off (-S): transformers is missing.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    os.chmod(bare, 0o755)
    report = check_data(bad_file, shared_tiny(tmp_path_factory), python=str(bare))
    assert report.tokens is None
    assert report.tokens_unavailable is not None
    assert "need transformers in the training python" in report.tokens_unavailable
    with pytest.raises(BadInput, match="does not exist"):
        check_data(bad_file, tmp_path / "no-model")
