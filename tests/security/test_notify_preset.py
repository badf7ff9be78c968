"""A preset's ``notify:`` block is refused at load when it names a CA bundle that is not one, or
a webhook URL that carries its secret in clear (which the run's preset.yaml, the saved preset and
every error would then repeat): exit 2, one line naming the field where it was written
(``file:line:col``) and the fix, before anything is written; the secret never in the output."""

from __future__ import annotations

import io
import os
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from backend.errors import BadInput
from backend.preset.loader import load_preset, save_preset
from backend.redact import redact_text
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]
CA = ROOT / "tests" / "fixtures" / "tls" / "ca.crt"
SECRET = "s3cr3t-value-42"


def cli(*argv: str) -> tuple[int, str, str]:
    """`trainwiz ARGV` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRAINWIZ_LANG", "en")
    monkeypatch.setenv("TRAINWIZ_NO_NETWORK", "1")
    monkeypatch.chdir(tmp_path)


def preset_file(tmp_path: Path, notify: dict) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["notify"] = notify
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` holding ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def bad_ca(tmp_path: Path, kind: str) -> str:
    if kind == "dev_zero":
        return "/dev/zero"
    if kind == "directory":
        return str(tmp_path)
    if kind == "missing":
        return str(tmp_path / "nope.pem")
    if kind == "fifo":
        os.mkfifo(tmp_path / "ca.fifo")  # opening it would wait for a writer forever
        return str(tmp_path / "ca.fifo")
    if kind == "empty":
        (tmp_path / "empty.pem").write_text("")
        return str(tmp_path / "empty.pem")
    (tmp_path / "text.pem").write_text("just some words\n" * 10)
    return str(tmp_path / "text.pem")


@pytest.mark.parametrize("kind", ["dev_zero", "directory", "missing", "fifo", "empty", "no_pem"])
def test_plan_refuses_a_ca_file_that_is_no_ca_bundle(tmp_path: Path, kind: str) -> None:
    ca = bad_ca(tmp_path, kind)
    path = preset_file(tmp_path, {"ca_file": ca})
    started = time.monotonic()
    code, out, err = cli("plan", str(path))
    assert time.monotonic() - started < 20
    assert code == 2, (out, err)
    said = err.strip().splitlines()
    assert len(said) == 1, said
    assert f"{path}:{line_of(path, 'ca_file')}:" in said[0] and "notify.ca_file" in said[0], said
    assert "PEM" in said[0] and "Traceback" not in err, said
    assert not out


def test_a_pem_bundle_is_accepted(tmp_path: Path) -> None:
    path = preset_file(tmp_path, {"ca_file": str(CA)})
    assert load_preset(path).notify.ca_file == str(CA)


SECRET_URLS = {
    "token": f"https://hooks.example.com/x?token={SECRET}",
    "key": f"https://hooks.example.com/x?a=1&key={SECRET}",
    "secret": f"https://hooks.example.com/x?secret={SECRET}",
    "password": f"https://hooks.example.com/x?password={SECRET}",
    "access_token": f"https://hooks.example.com/robot/send?access_token={SECRET}",
    "api_key": f"https://hooks.example.com/x?api_key={SECRET}",
    "sig": f"https://hooks.example.com/x?sv=2024&sig={SECRET}",
    "userinfo": f"https://bot:{SECRET}@hooks.example.com/x",
}


@pytest.mark.parametrize("name", sorted(SECRET_URLS))
@pytest.mark.parametrize("command", ["plan", "check", "tune"])
def test_a_webhook_url_with_its_secret_in_clear_is_refused(
    tmp_path: Path, name: str, command: str
) -> None:
    path = preset_file(tmp_path, {"webhooks": [{"kind": "generic", "url": SECRET_URLS[name]}]})
    argv = {"plan": ["plan", str(path)], "check": ["check", "--preset", str(path), "--json"],
            "tune": ["tune", str(path), "--no-probe", "--write", str(tmp_path / "t.yaml")]}  # fmt: skip
    code, out, err = cli(*argv[command])
    assert code == 2, (out, err)
    said = err.strip().splitlines()
    assert len(said) == 1, said
    assert f"{path}:{line_of(path, 'url:')}:" in said[0], said
    assert "notify.webhooks[0].url" in said[0], said
    assert "environment variable" in said[0] and "token_env" in said[0], said
    assert "url_env" in said[0], said
    assert SECRET not in out + err
    assert not (tmp_path / "t.yaml").exists() and not (tmp_path / "home" / "runs").exists()


def test_a_secret_url_is_never_saved(tmp_path: Path) -> None:
    path = preset_file(tmp_path, {"webhooks": [{"kind": "generic", "url": SECRET_URLS["token"]}]})
    with pytest.raises(BadInput) as refused:
        load_preset(path)
    assert SECRET not in str(refused.value)
    fine = preset_file(tmp_path, {"webhooks": [{"kind": "dingtalk", "url_env": "DING_URL"}]})
    preset = load_preset(fine)
    hook = preset.notify.webhooks[0].model_copy(update={"url": SECRET_URLS["token"]})
    bad = preset.model_copy(
        update={"notify": preset.notify.model_copy(update={"webhooks": [hook]})}
    )
    with pytest.raises(BadInput):
        save_preset(bad, tmp_path / "saved.yaml")  # never writes what would not load back
    assert not (tmp_path / "saved.yaml").exists()


def test_a_whole_url_from_url_env_is_fine_and_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DING_URL", SECRET_URLS["access_token"])
    path = preset_file(tmp_path, {"webhooks": [{"kind": "dingtalk", "url_env": "DING_URL"}]})
    code, out, err = cli("plan", str(path), "--json")
    assert code == 0, err
    assert SECRET not in out + err


@pytest.mark.parametrize("name", sorted(SECRET_URLS))
def test_a_secret_in_a_url_is_redacted_wherever_it_is_shown(name: str) -> None:
    shown = redact_text(f"posting to {SECRET_URLS[name]} now")
    assert SECRET not in shown and "hooks.example.com" in shown, shown


def test_an_ordinary_query_is_shown_as_it_is() -> None:
    url = "https://hooks.example.com/x?channel=ops&monkey=1&keyboard=us"
    assert redact_text(url) == url


def test_the_watcher_never_opens_a_fifo_as_its_ca_bundle(tmp_path: Path) -> None:
    """A run's own record is not re-checked on load; the bundle is checked before it is read."""
    from backend.preset.schema_notify import Webhook
    from backend.runs import notify

    fifo = bad_ca(tmp_path, "fifo")
    hook = Webhook(kind="generic", url="https://127.0.0.1:9/hook")
    message = notify.Message("finished", "run-1", "title", "text", {})
    started = time.monotonic()
    ok, detail = notify.deliver(hook, message, ca_file=fifo, env={}, deadline=10)
    assert not ok and "not a regular file" in detail, detail
    assert time.monotonic() - started < 5


def test_a_runs_own_record_still_loads_when_its_ca_file_is_gone(tmp_path: Path) -> None:
    """The launch checked it; chat, serve, export and resume of the run read its record later."""
    from backend.preset.runpreset import run_preset
    from tests.run_records import make_ended_run

    run_dir = make_ended_run(tmp_path, "finished", None, preset="p", log="ok\n")
    record = yaml.safe_load((run_dir / "preset.yaml").read_text())
    record["notify"] = {"ca_file": str(tmp_path / "gone.pem")}
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(record))
    assert run_preset(run_dir).notify.ca_file == str(tmp_path / "gone.pem")
    with pytest.raises(BadInput, match=r"notify\.ca_file"):
        load_preset(run_dir / "preset.yaml")  # given as a preset: checked


def test_a_relative_ca_file_is_recorded_as_the_file_it_named_at_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher reads the bundle when the run ends, from its own working directory: the
    run's preset.yaml holds the absolute path of the file the launch checked."""
    from backend.plan.resolve import resolve_preset

    where = tmp_path / "certs"
    where.mkdir()
    (where / "ca.pem").write_bytes(CA.read_bytes())
    monkeypatch.chdir(where)
    preset = load_preset(preset_file(tmp_path, {"ca_file": "ca.pem"}))
    run_dir = tmp_path / "run"
    assert resolve_preset(preset, run_dir).notify.ca_file == str(where / "ca.pem")
    assert resolve_preset(preset, None).notify.ca_file == "ca.pem"  # `plan` shows it as written
    monkeypatch.chdir(tmp_path)  # another directory: the recorded path still names the bundle
    assert load_preset(preset_file(tmp_path, {"ca_file": str(where / "ca.pem")})).notify.ca_file
