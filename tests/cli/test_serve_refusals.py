"""`trainwiz serve`'s refusals, said before any process starts: exit 2 and one line that names
the flag and the fix. An empty key variable (its name or its value), a non-loopback address
without a key (unless --allow-no-key, which the serve record then says), a negative or missing
checkpoint, a host that does not resolve or is no address of this machine, a port in use.

In-process and fast: the run is a folder with a stand-in model, and starting anything fails
the test (``serve.start`` and the detached supervisor are replaced by a tripwire)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from backend.ports import any_free_port
from backend.results import serve, serve_run
from tests.run_records import make_ended_run
from tui.cli import main


def served_run(tmp_path: Path) -> Path:
    """A finished run whose output_dir holds (stand-in) full weights and checkpoint-3."""
    run_dir = make_ended_run(tmp_path, "finished", 3, preset="r", log="done\n")
    out = tmp_path / "out"
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"")
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def tripwire(*_a: object, **_k: object) -> None:
        raise AssertionError("a refused serve started its processes")

    monkeypatch.setattr(serve, "start", tripwire)
    monkeypatch.setattr(serve_run, "start_detached", tripwire)
    return served_run(tmp_path)


def refused(capsys: pytest.CaptureFixture[str], run_dir: Path, *args: str) -> str:
    """`trainwiz serve RUN ARGS` exits 2 with exactly one line on stderr; that line."""
    code = main(["serve", str(run_dir), "--port", str(any_free_port()), "--device", "cpu", *args])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, lines
    return lines[0]


def test_an_empty_key_variable_name_is_refused(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, run_dir, "--api-key-env", "")
    assert "--api-key-env" in line and "name of an environment variable" in line


def test_a_key_variable_set_but_empty_is_refused_and_an_unset_one_too(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TW_EMPTY_KEY", "")
    line = refused(capsys, run_dir, "--api-key-env", "TW_EMPTY_KEY")
    assert "--api-key-env TW_EMPTY_KEY" in line and "is empty" in line
    assert "set it to the API key" in line
    monkeypatch.delenv("TW_UNSET_KEY", raising=False)
    line = refused(capsys, run_dir, "--api-key-env", "TW_UNSET_KEY")
    assert "--api-key-env TW_UNSET_KEY" in line and "not set" in line


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_non_loopback_host_without_a_key_is_refused(
    run_dir: Path, capsys: pytest.CaptureFixture[str], host: str
) -> None:
    line = refused(capsys, run_dir, "--host", host)
    assert f"--host {host}" in line and "without an API key" in line
    assert "--api-key-env VAR" in line and "--allow-no-key" in line


def test_allow_no_key_serves_open_with_a_warning_and_the_record_says_so(run_dir: Path) -> None:
    plan = serve.plan_serve(
        run_dir, host="0.0.0.0", port=any_free_port(), device="cpu", allow_no_key=True
    )
    (warning,) = plan.warnings
    assert "0.0.0.0" in warning and "other machines" in warning and "API key" in warning
    assert plan.engine == "model_worker" and plan.model_name == run_dir.name
    (run_dir / "serve").mkdir()
    serve_run.write_record(plan, os.getpid(), ready=True)
    record = serve_run.read_record(run_dir)
    assert record is not None
    assert record["api_key"] is False and record["allow_no_key"] is True
    assert (
        serve_run.main([str(run_dir), "--host", "0.0.0.0", "--port", str(any_free_port())]) == 2
    )  # supervisor
    assert "--allow-no-key" in (run_dir / "serve" / "failed.txt").read_text()


def test_a_key_or_a_loopback_address_needs_no_allowance(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TW_KEY", "k")
    keyed = serve.plan_serve(run_dir, host="0.0.0.0", port=any_free_port(), api_key_env="TW_KEY")
    assert "other machines" in keyed.warnings[0] and "$API_KEY" in keyed.curl()
    assert "--api-key-env" not in keyed.warnings[0]
    (run_dir / "serve").mkdir()
    serve_run.write_record(keyed, os.getpid())
    record = serve_run.read_record(run_dir)
    assert record is not None and record["api_key"] is True and record["allow_no_key"] is False
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        plan = serve.plan_serve(run_dir, host=host, port=any_free_port(), device="cpu")
        assert plan.warnings == [], host


def test_a_negative_checkpoint_is_refused_naming_the_flag(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, run_dir, "--checkpoint", "-1")
    assert line.startswith("trainwiz: --checkpoint -1:") and "checkpoint--1" not in line
    assert "step" in line and "complete ones: 3" in line
    line = refused(capsys, run_dir, "--checkpoint", "7")
    assert "--checkpoint 7" in line and "complete ones: 3" in line


def test_an_unresolvable_host_is_not_a_port_in_use(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, run_dir, "--host", "nosuch.invalid")
    assert "--host nosuch.invalid" in line and "resolve" in line and "in use" not in line
    line = refused(capsys, run_dir, "--host", "192.0.2.1")  # TEST-NET-1: no interface has it
    assert "--host 192.0.2.1" in line and "address of this machine" in line
    assert "in use" not in line


def test_a_port_in_use_is_still_said(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main(["serve", str(run_dir), "--port", str(port), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and f"--port {port}" in err and "in use" in err


def test_a_refused_serve_writes_no_record(run_dir: Path) -> None:
    """Nothing claims to be serving after a refusal."""
    with pytest.raises(Exception, match="allow-no-key"):
        serve.plan_serve(run_dir, host="0.0.0.0", port=any_free_port(), device="cpu")
    assert not (run_dir / "serve" / "serve.json").exists()
