"""Hostile preset files: each is a short ``file:line`` error and exit 2, with bounded memory.

The CLI runs in a subprocess under a 1.5 GiB address-space limit, so a preset that makes the
loader balloon (the old loader took 11 GB on the 1.5 KB bomb) fails the test instead of the
machine; the timeout is only a hang guard (timings live in benchmarks/preset_limits.py).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.preset import load_preset, parse_preset_text

HEAD = """\
schema: 1
name: hostile
model: {source: local, dir: /tmp/m}
training:
  data_path: d.json
  output_dir: out
"""

BOMB = (
    HEAD
    + "  fsdp_config:\n"
    + '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"    {c}: &{c} [{','.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
)


def _limit_memory() -> None:
    limit = 1536 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
        check=False,
    )


def _refused(path: Path, *expect: str, max_err: int = 4000) -> str:
    done = _cli("plan", str(path), cwd=path.parent)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr) < max_err  # the old loader printed 2 GiB for the bomb
    for text in expect:
        assert text in done.stderr, done.stderr
    return done.stderr


def test_yaml_bomb_in_fsdp_config_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 1600
    _refused(path, f"{path}:", "expands to more than")


def test_deep_nesting_is_refused_without_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(HEAD + "  fsdp_config: " + "[" * 1000 + "]" * 1000 + "\n")
    _refused(path, f"{path}:7:", "nesting deeper than")
    block = tmp_path / "block.yaml"
    block.write_text(HEAD + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(1000)))
    _refused(block, "nesting deeper than")


def test_duplicate_key_and_second_section_name_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(HEAD + "  output_dir: other\ntraining:\n  data_path: e.json\n")
    err = _refused(path)
    assert f"{path}:7:3 output_dir: key 'output_dir' appears again (first at line 6)" in err
    assert f"{path}:8:1 training: section 'training' appears again (first at line 4)" in err


def test_duplicate_inside_a_flow_mapping_and_a_list_item() -> None:
    with pytest.raises(BadInput, match=r"p.yaml:3:\d+ source: key 'source' appears again"):
        parse_preset_text(HEAD.replace("{source: local,", "{source: local, source: hf,"), "p.yaml")
    text = HEAD.replace("training:", "container:\n  volumes:\n  - {host: /a, host: /b}\ntraining:")
    with pytest.raises(BadInput, match="key 'host' appears again"):
        parse_preset_text(text, "p.yaml")


@pytest.mark.parametrize(
    ("name", "raw", "expect"),
    [
        ("utf16.yaml", HEAD.encode("utf-16"), "UTF-16: save it as UTF-8"),
        ("utf16be.yaml", HEAD.encode("utf-16-be"), "UTF-16"),
        ("latin1.yaml", HEAD.replace("hostile", "caf\xe9").encode("latin-1"), ":2:10: byte 0xe9"),
        ("binary.yaml", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "NUL bytes"),
    ],
)
def test_undecodable_files_are_named(tmp_path: Path, name: str, raw: bytes, expect: str) -> None:
    path = tmp_path / name
    path.write_bytes(raw)
    _refused(path, expect)


def test_directory_symlink_loop_and_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "adir.yaml").mkdir()
    _refused(tmp_path / "adir.yaml", "is a directory")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    _refused(tmp_path / "loop1", "symbolic link that leads nowhere")


def test_50_mb_preset_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as handle:
        handle.write(HEAD + "description: '")
        handle.write("x" * (50 * 1024 * 1024))
        handle.write("'\n")
    _refused(path, "larger than a preset can be")
    with pytest.raises(BadInput, match="larger than a preset"):
        parse_preset_text("description: " + "x" * (2 * 1024 * 1024))


def test_many_errors_print_a_bounded_report(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(HEAD + "".join(f"  unknown_{i}: 1\n" for i in range(500)))
    err = _refused(path, "... and 470 more problems", max_err=40_000)
    assert err.count("\n") <= 31


def test_bad_ulimit_and_long_name_are_refused_at_load() -> None:
    ulimit = HEAD + "container:\n  ulimits: [{name: memlock, value: abc}]\n"
    with pytest.raises(BadInput, match=r"ulimits\[0\]\.value: 'abc' is not a ulimit"):
        parse_preset_text(ulimit, "p.yaml")
    with pytest.raises(BadInput, match="at most 100 characters"):
        parse_preset_text(HEAD.replace("name: hostile", "name: " + "n" * 300), "p.yaml")


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("  per_device_train_batch_size: 1000000000000000000000000000000", "batch_size"),
        ("  num_train_epochs: .inf", "num_train_epochs"),
        ("  learning_rate: .nan", "learning_rate"),
        ("  learning_rate: .inf", "learning_rate"),
        ("  max_steps: -100", "max_steps"),
        ("  model_max_length: 100000000000", "model_max_length"),
        ("  warmup_steps: -5", "warmup_steps"),
    ],
)
def test_numeric_bounds_from_the_issue(line: str, field: str) -> None:
    with pytest.raises(BadInput, match=field):
        parse_preset_text(HEAD + line + "\n", "p.yaml")


def test_shipped_presets_still_load() -> None:
    for name in ("tiny-cpu", "vicuna-13b-v1.3-8xa100", "vicuna-7b-4xa100-40g"):
        assert load_preset(name).name == name
