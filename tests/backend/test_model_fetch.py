"""`trainwiz model fetch` end to end: Hub repo through the CLI, git-lfs clone, tiny preset."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from backend.model.gitlfs import clone_lfs
from backend.model.hub import FetchProgress, NotEnoughDisk
from backend.model.validate import validate_model_dir
from tests.backend.hubserver import FakeHub, Repo, write_llama_dir
from tests.backend.test_model_validate import shared_tiny
from tui.cli import main


def git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture()
def lfs_repo(tmp_path: Path) -> tuple[Path, int]:
    """A local git repo whose weights are LFS objects, as on the Hub."""
    src = tmp_path / "origin"
    n = write_llama_dir(src)
    git("init", "-q", "-b", "main", cwd=src)
    git("lfs", "install", "--local", cwd=src)
    git("lfs", "track", "*.safetensors", "*.model", cwd=src)
    git("add", ".", cwd=src)
    git("commit", "-qm", "weights", cwd=src)
    return src, n


def test_git_lfs_clone_pulls_weights_with_progress(
    lfs_repo: tuple[Path, int], tmp_path: Path
) -> None:
    src, n = lfs_repo
    seen: list[FetchProgress] = []
    result = clone_lfs(f"file://{src}", tmp_path / "clone", progress=seen.append)
    shard = "model-00001-of-00002.safetensors"
    assert filecmp.cmp(src / shard, tmp_path / "clone" / shard, shallow=False)
    report = validate_model_dir(tmp_path / "clone")
    assert report.ok and report.n_params == n
    assert len(result.commit) == 40 and shard in result.files
    assert seen and seen[-1].bytes == seen[-1].total == result.total_bytes
    # Fetching again reuses the clone.
    assert clone_lfs(f"file://{src}", tmp_path / "clone").commit == result.commit


def test_git_lfs_refuses_when_weights_do_not_fit(
    lfs_repo: tuple[Path, int], tmp_path: Path
) -> None:
    src, _ = lfs_repo
    with pytest.raises(NotEnoughDisk, match="only the pointers were cloned"):
        clone_lfs(f"file://{src}", tmp_path / "clone", free=lambda _p: 1000)
    pointer = (tmp_path / "clone" / "model-00001-of-00002.safetensors").read_text()
    assert pointer.startswith("version https://git-lfs")


def test_cli_fetch_repo_from_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    src = tmp_path / "src"
    n = write_llama_dir(src)
    hub = FakeHub()
    hub.repos["acme/m"] = Repo.from_dir(src)
    hub.repos["acme/private"] = Repo.from_dir(src, token="secret-token")
    hub.start()
    try:
        code = main(["model", "fetch", "acme/m", "--endpoint", hub.url, "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["ok"] and out["report"]["n_params"] == n
        # No --dir: it lands under TRAINWIZ_HOME/models/owner--name.
        assert out["dir"] == str(Path(os.environ["TRAINWIZ_HOME"]) / "models" / "acme--m")
        code = main(
            ["model", "fetch", "acme/private", "--endpoint", hub.url, "--dir", str(tmp_path / "p")]
        )
        assert code == 2
        assert "HF_TOKEN" in capsys.readouterr().err
    finally:
        hub.stop()


def test_cli_fetch_tiny_preset_keeps_a_current_model(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    target = Path(os.environ["TRAINWIZ_HOME"]) / "models" / "tiny-llama"
    shutil.copytree(shared_tiny(tmp_path_factory), target)
    assert main(["model", "fetch", "tiny-cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "kept" and out["dir"] == str(target)
    assert out["report"]["n_params"] == 166_208
