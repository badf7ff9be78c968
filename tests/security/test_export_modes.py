"""Exported files all get the mode of a new file under the user's umask (0644 usually), even
when the run wrote them 0600 (the watcher's umask 077 keeps a run private; an export is for
sharing)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.backend.test_lora_export import export, make_run


def _export_under_umask_022(home: Path, run_dir: Path) -> None:
    """`trainwiz export RUN --to HOME/shared` as a user with the usual umask; it must succeed."""
    old = os.umask(0o022)
    try:
        done = export(home, run_dir.name, "--to", str(home / "shared"))
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr


def test_an_adapter_export_is_0644_under_umask_022(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, {"method": "lora"}, adapter_base=str(tmp_path / "m"))
    out = tmp_path / "out"
    for path in out.iterdir():
        os.chmod(path, 0o600)  # as the watcher wrote them
    (out / "tokenizer.model").write_bytes(b"\0")
    os.chmod(out / "tokenizer.model", 0o600)
    _export_under_umask_022(tmp_path, run_dir)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "shared").iterdir()}
    assert modes and set(modes.values()) == {0o644}, modes
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o755


@pytest.mark.slow
def test_a_full_export_is_0644_under_umask_022(tmp_path: Path) -> None:
    """The same for a full fine-tune's export, which the worker writes by loading the model
    back and saving it (a real tiny Llama, its files left 0600 as the watcher writes them)."""
    from backend.model.tiny import make_tiny

    run_dir = make_run(tmp_path, {})
    out = tmp_path / "out"
    out.rmdir()
    make_tiny(out)
    for path in out.iterdir():
        os.chmod(path, 0o600)
    _export_under_umask_022(tmp_path, run_dir)
    files = [p for p in (tmp_path / "shared").rglob("*") if p.is_file()]
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in files}
    assert any(name.endswith(".safetensors") for name in modes), modes
    assert set(modes.values()) == {0o644}, modes
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o755
