"""The Hub token goes only over https to hosts the user trusts; never over http, never elsewhere.

Real huggingface_hub client (in-process API and the download subprocess) and urllib (the network
check) against loopback hubs (tests/backend/hubserver.py) that record every Authorization header.
TLS hubs use the throwaway test CA in tests/fixtures/tls.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.checks import run_checks
from backend.errors import BadInput
from backend.model.hub import fetch_hub, plan_download
from backend.preset.schema import Preset
from backend.tokens import decide, host_trusted, token_env_allowed
from tests.backend.hubserver import FakeHub, Repo, trust_test_ca, write_llama_dir

SECRET = "hf_TESTTOKEN_do_not_leak_0123456789"


@pytest.fixture()
def model_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "TRAINWIZ_TOKEN_HOSTS"):
        monkeypatch.delenv(var, raising=False)
    src = tmp_path / "src"
    write_llama_dir(src, shards=1)
    return src


def _hub(src: Path, tls: bool, private: bool = True) -> FakeHub:
    hub = FakeHub(tls=tls)
    hub.repos["acme/private"] = Repo.from_dir(src, token=SECRET if private else None)
    hub.repos["acme/public"] = Repo.from_dir(src)
    return hub.start()


@pytest.fixture()
def http_hub(model_src: Path) -> Iterator[FakeHub]:
    hub = _hub(model_src, tls=False)
    yield hub
    hub.stop()


@pytest.fixture()
def https_hub(model_src: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    trust_test_ca(monkeypatch)
    monkeypatch.delenv("TRAINWIZ_TOKEN_HOSTS")  # trusted CA, but the host is not listed yet
    hub = _hub(model_src, tls=True)
    yield hub
    hub.stop()


def _no_secret_under(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_http_endpoint_never_gets_the_token_even_when_listed(
    http_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("TRAINWIZ_TOKEN_HOSTS", "127.0.0.1")  # listed, but http: still refused
    with pytest.raises(BadInput, match="not https") as caught:
        plan_download("acme/private", tmp_path / "d", endpoint=http_hub.url)
    assert SECRET not in str(caught.value)
    plan = plan_download("acme/public", tmp_path / "d", endpoint=http_hub.url)
    fetch_hub(plan)  # the worker subprocess inherits HF_TOKEN from us: it must not send it
    assert http_hub.auth_seen == []
    _no_secret_under(tmp_path / "d")


def test_cached_login_is_not_sent_to_an_untrusted_endpoint(
    http_hub: FakeHub, tmp_path: Path
) -> None:
    hf_home = Path(os.environ["HF_HOME"])
    hf_home.mkdir(parents=True, exist_ok=True)
    (hf_home / "token").write_text(SECRET)  # what `hf auth login` leaves behind
    plan = plan_download("acme/public", tmp_path / "d", endpoint=http_hub.url)
    fetch_hub(plan)
    assert http_hub.auth_seen == []


def test_https_host_must_be_on_the_users_list(
    https_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with pytest.raises(BadInput, match="TRAINWIZ_TOKEN_HOSTS"):
        plan_download("acme/private", tmp_path / "d", endpoint=https_hub.url)
    assert https_hub.auth_seen == []
    monkeypatch.setenv("TRAINWIZ_TOKEN_HOSTS", "example.org, 127.0.0.1")
    plan = plan_download("acme/private", tmp_path / "d", endpoint=https_hub.url)
    fetch_hub(plan)
    assert set(https_hub.auth_seen) == {f"Bearer {SECRET}"}
    _no_secret_under(tmp_path / "d")


def test_token_env_must_look_like_a_token_variable(
    https_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_TOKEN_HOSTS", "127.0.0.1")
    monkeypatch.setenv("SOME_OTHER_SECRET", SECRET)
    with pytest.raises(BadInput, match="does not look like a token variable"):
        plan_download(
            "acme/private", tmp_path / "d", endpoint=https_hub.url, token_env="SOME_OTHER_SECRET"
        )
    assert https_hub.auth_seen == []
    monkeypatch.setenv("TRAINWIZ_TOKEN_ENVS", "SOME_OTHER_SECRET")  # the user confirms it
    plan_download(
        "acme/private", tmp_path / "d", endpoint=https_hub.url, token_env="SOME_OTHER_SECRET"
    )
    assert https_hub.auth_seen == [f"Bearer {SECRET}"]


def _check(tmp_path: Path, endpoint: str, repo: str = "acme/private", token_env: str = "HF_TOKEN"):  # type: ignore[no-untyped-def]
    preset = Preset.model_validate(
        {
            "name": "t",
            "model": {
                "source": "hf",
                "repo": repo,
                "dir": str(tmp_path / "m"),
                "endpoint": endpoint,
                "token_env": token_env,
            },
            "training": {"data_path": "d", "output_dir": "o"},
        }
    )
    (result,) = run_checks(preset, only=["hf_endpoint"])
    return result


def test_network_check_sends_no_token_over_http_or_to_unlisted_hosts(
    http_hub: FakeHub, https_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("SOME_OTHER_SECRET", SECRET)
    gated = _check(tmp_path, http_hub.url)
    assert gated.status == "fail" and "not https" in gated.fix
    assert _check(tmp_path, https_hub.url).status == "fail"
    assert _check(tmp_path, https_hub.url, token_env="SOME_OTHER_SECRET").status == "fail"
    assert http_hub.auth_seen == [] and https_hub.auth_seen == []
    monkeypatch.setenv("TRAINWIZ_TOKEN_HOSTS", "127.0.0.1")
    assert _check(tmp_path, https_hub.url).status == "ok"
    assert https_hub.auth_seen == [f"Bearer {SECRET}"]
    assert SECRET not in str(_check(tmp_path, https_hub.url).model_dump())


@pytest.mark.parametrize(
    ("endpoint", "trusted"),
    [
        ("https://huggingface.co", True),
        ("https://hub.huggingface.co/", True),
        ("https://hf-mirror.com", True),
        ("http://huggingface.co", False),
        ("https://huggingface.co.evil.com", False),
        ("https://evilhuggingface.co", False),
        ("https://huggingface.co@evil.com", False),
        ("https://127.0.0.1:8443", False),
        ("ftp://huggingface.co", False),
        ("not a url", False),
    ],
)
def test_host_list(endpoint: str, trusted: bool) -> None:
    assert host_trusted(endpoint)[0] is trusted


def test_token_names() -> None:
    for ok in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MY_HF_TOKEN", "hf_token"):
        assert token_env_allowed(ok)
    for bad in ("SOME_OTHER_SECRET", "AWS_SECRET_ACCESS_KEY", "PATH", "TOKENS", "HOME"):
        assert not token_env_allowed(bad)
    assert not decide("https://huggingface.co", "AWS_SECRET_ACCESS_KEY").send


def test_cli_token_host_flag_is_the_users_explicit_yes(
    https_hub: FakeHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tui.cli import main

    monkeypatch.setenv("HF_TOKEN", SECRET)
    args = ["model", "fetch", "acme/private", "--endpoint", https_hub.url, "--dir"]
    assert main([*args, str(tmp_path / "a")]) == 2
    assert "TRAINWIZ_TOKEN_HOSTS" in capsys.readouterr().err and https_hub.auth_seen == []
    assert main([*args, str(tmp_path / "b"), "--token-host", "127.0.0.1"]) == 0
    assert f"Bearer {SECRET}" in https_hub.auth_seen
    out, err = capsys.readouterr()
    assert SECRET not in out + err
