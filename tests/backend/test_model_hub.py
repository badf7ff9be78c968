"""Downloads with the real huggingface_hub client from a loopback Hub (tests/backend/hubserver.py)."""

from __future__ import annotations

import filecmp
import threading
from pathlib import Path

import pytest

from backend.errors import BadInput, TrainwizError
from backend.model.hub import (
    Cancelled,
    FetchProgress,
    NotEnoughDisk,
    _incomplete_bytes,
    fetch_hub,
    plan_download,
    select_files,
)
from backend.model.validate import validate_model_dir
from tests.backend.hubserver import FakeHub, Repo, trust_test_ca, write_llama_dir

REPO = "acme/llama-small"
SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture()
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A started loopback hub holding a small sharded model; HF state isolated in tmp."""
    vocab = getattr(request, "param", 300)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    src = tmp_path / "src"
    n_params = write_llama_dir(src, shards=2, with_bin=True, vocab=vocab)
    hub = FakeHub()
    hub.repos[REPO] = Repo.from_dir(src)
    hub.start()
    yield hub, src, n_params
    hub.stop()


def _same_tree(src: Path, dst: Path, names: list[str]) -> None:
    for name in names:
        assert filecmp.cmp(src / name, dst / name, shallow=False), name


def test_download_prefers_safetensors_and_validates(hub_env, tmp_path: Path) -> None:
    hub, src, n_params = hub_env
    events: list[FetchProgress] = []
    plan = plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    assert "pytorch_model.bin" in plan.skipped
    result = fetch_hub(plan, progress=events.append)
    _same_tree(src, tmp_path / "dst", result.files)
    assert not (tmp_path / "dst" / "pytorch_model.bin").exists()
    assert hub.gets("pytorch_model.bin") == []
    report = validate_model_dir(tmp_path / "dst")
    assert report.ok, report.problems
    assert report.n_params == n_params == report.n_params_from_config
    assert report.dtype == "bfloat16"
    last = events[-1]
    assert last.bytes == last.total == plan.total_bytes and last.files_done == len(plan.files)


BIG = 90000  # vocab making the first shard larger than huggingface_hub's 10 MiB read chunk


@pytest.mark.parametrize("hub_env", [BIG], indirect=True)
def test_interrupted_mid_file_resumes_byte_identical(hub_env, tmp_path: Path) -> None:
    hub, src, _ = hub_env
    size = (src / SHARD).stat().st_size
    assert size > 11 * 2**20
    hub.faults.drop_after[SHARD] = 11 * 2**20
    plan = plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    result = fetch_hub(plan)
    assert result.retries >= 1
    # The second request asked only for the rest of the file: the kept bytes were reused.
    first, second = hub.gets(SHARD)
    assert first is None and second is not None
    start = int(second.removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 11 * 2**20
    _same_tree(src, tmp_path / "dst", result.files)


@pytest.mark.parametrize("hub_env", [BIG], indirect=True)
def test_cancel_then_fetch_again_resumes_from_partial_file(hub_env, tmp_path: Path) -> None:
    hub, src, _ = hub_env
    hub.faults.stall_after[SHARD] = 11 * 2**20
    cancel = threading.Event()
    seen: list[FetchProgress] = []

    def progress(p: FetchProgress) -> None:
        if p.file == SHARD and hub.faults.stalled.is_set() and p.file_bytes > 0:
            seen.append(p)
            cancel.set()

    plan = plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    with pytest.raises(Cancelled):
        fetch_hub(plan, progress=progress, cancel=cancel)
    hub.faults.release.set()
    assert not (tmp_path / "dst" / SHARD).exists()
    # the worker may write on for a moment after the cancel: resume from what is on disk
    partial = _incomplete_bytes(tmp_path / "dst", SHARD)
    assert partial >= seen[-1].file_bytes > 0
    again = plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    assert again.need_bytes <= plan.need_bytes - partial  # the partial file counts as had
    fetch_hub(again)
    assert hub.gets(SHARD)[-1] == f"bytes={partial}-"
    _same_tree(src, tmp_path / "dst", [f.name for f in again.files])


def test_too_little_disk_refused_before_any_download(hub_env, tmp_path: Path) -> None:
    hub, _, _ = hub_env
    # The API advertises a shard far bigger than any real disk: the real free-space check refuses.
    hub.faults.advertise[SHARD] = 2**62
    with pytest.raises(NotEnoughDisk, match="nothing was downloaded"):
        plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    assert not any("/resolve/" in path for _, path, _ in hub.log)


def test_injected_free_space_is_used(hub_env, tmp_path: Path) -> None:
    hub, _, _ = hub_env
    with pytest.raises(NotEnoughDisk, match=r"only 0\.0 MiB is free"):
        plan_download(REPO, tmp_path / "dst", endpoint=hub.url, free=lambda _p: 1000)


def test_missing_repo_and_revision_are_named(hub_env, tmp_path: Path) -> None:
    hub, _, _ = hub_env
    with pytest.raises(BadInput, match=r"model\.repo: no repository 'acme/nope'"):
        plan_download("acme/nope", tmp_path / "d", endpoint=hub.url)
    with pytest.raises(BadInput, match=r"model\.revision: .* no revision 'v9'"):
        plan_download(REPO, tmp_path / "d", revision="v9", endpoint=hub.url)


def test_private_repo_401_names_the_token_variable(
    hub_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, src, _ = hub_env
    # Tokens go only over https to a host the user listed: a TLS loopback hub, 127.0.0.1 listed.
    trust_test_ca(monkeypatch)
    hub = FakeHub(tls=True)
    hub.repos["acme/private"] = Repo.from_dir(src, token="hf_right")
    hub.start()
    request_stop = hub.stop
    with pytest.raises(BadInput, match=r"HTTP 401.*MY_TOKEN"):
        plan_download("acme/private", tmp_path / "d", endpoint=hub.url, token_env="MY_TOKEN")
    monkeypatch.setenv("MY_TOKEN", "hf_wrong")
    with pytest.raises(BadInput, match="HTTP 401"):
        plan_download("acme/private", tmp_path / "d", endpoint=hub.url, token_env="MY_TOKEN")
    monkeypatch.setenv("MY_TOKEN", "hf_right")
    plan = plan_download("acme/private", tmp_path / "d", endpoint=hub.url, token_env="MY_TOKEN")
    fetch_hub(plan, token_env="MY_TOKEN")
    assert validate_model_dir(tmp_path / "d").ok
    # The token is used, never written: no file under the model dir holds it.
    for path in (tmp_path / "d").rglob("*"):
        if path.is_file():
            assert b"hf_right" not in path.read_bytes()
    assert "Bearer hf_right" in hub.auth_seen
    request_stop()


def test_truncated_shard_gives_clear_message_and_validation_catches_it(
    hub_env, tmp_path: Path
) -> None:
    hub, _, _ = hub_env
    hub.faults.truncate[SHARD] = 1000
    plan = plan_download(REPO, tmp_path / "dst", endpoint=hub.url)
    with pytest.raises(
        TrainwizError,
        match=rf"{SHARD}: the connection kept breaking .*IncompleteRead.*run fetch again to resume",
    ):
        fetch_hub(plan, retries=1)
    # A shard cut short on disk (copied by hand, say) is named by validation.
    local = tmp_path / "local"
    write_llama_dir(local)
    data = (local / SHARD).read_bytes()
    (local / SHARD).write_bytes(data[: len(data) // 2])
    report = validate_model_dir(local)
    assert not report.ok
    assert any(SHARD in p and "cut short" in p for p in report.problems)


def test_select_files_skips_duplicate_weight_formats() -> None:
    sizes = {n: 1 for n in ["config.json", "model.safetensors", "pytorch_model.bin",
                            "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack",
                            "original/consolidated.00.pth", "tokenizer.model"]}  # fmt: skip
    keep, skip = select_files(sizes)
    assert keep == ["config.json", "model.safetensors", "tokenizer.model"]
    assert len(skip) == 5
    only_bin = {"config.json": 1, "pytorch_model.bin": 1}
    assert select_files(only_bin) == (["config.json", "pytorch_model.bin"], [])
