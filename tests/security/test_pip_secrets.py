"""A private index's password stays where the user put it: not in the Dockerfile, the build
context, the tag or the host pip's argv; it goes only over https (tests/backend/authindex.py).

The docker half (a real build through the proxy, the image searched byte by byte) is
tests/integration/test_pip_secrets_docker.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from backend.errors import BadInput
from backend.images.catalog import describe_ref
from backend.images.dockerfile import (
    FLASH_ATTN_INDEX_SWAP,
    env_tag_for,
    render_dockerfile,
    write_context,
)
from backend.images.host import Gpu, HostGpus
from backend.images.pipproxy import index_proxy, peer_uid
from backend.images.plan import plan_environment
from backend.images.venv import _pip_commands, _run
from backend.preset.schema import Preset
from tests.backend.authindex import TLS_DIR, AuthIndex, ca_bundle
from tests.backend.mirrorservers import build_wheel
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pipSECRETpass0005"
FA_PASSWORD = "flashSECRET0006"
TOKEN = "extraTOKEN00007"
A100 = HostGpus("535.54.03", "12.2", [Gpu("NVIDIA A100", (8, 0))], 64 << 30, 32)
DEVEL = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
NO_PROXY_ENV = {"HTTP_PROXY": "", "HTTPS_PROXY": "", "http_proxy": "", "https_proxy": ""}


def secret_preset(**environment: object) -> Preset:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["runner"] = "docker"
    data["environment"] = {
        "mode": "image",
        "image": DEVEL,
        "pip_index_url": f"https://bob:{PASSWORD}@pypi.example.com/simple",
        "pip_extra_index_urls": [f"https://{TOKEN}@extra.example.com/simple"],
        "flash_attn": {"install": "always", "index_url": f"https://f:{FA_PASSWORD}@fa.example/s"},
        **environment,
    }
    return Preset.model_validate(data)


def _plan(preset: Preset):
    return plan_environment(preset, A100, describe_ref(DEVEL))


def test_dockerfile_context_and_tag_hold_no_credential(tmp_path: Path) -> None:
    plan = _plan(secret_preset())
    text = render_dockerfile(plan)
    write_context(plan, tmp_path)
    blobs = [text, env_tag_for(plan)]
    blobs += [p.read_bytes().decode() for p in tmp_path.rglob("*") if p.is_file()]
    for blob in blobs:
        for secret in (PASSWORD, FA_PASSWORD, TOKEN):
            assert secret not in blob
    assert "pypi.example.com" not in text  # the index is the proxy's; its address is an ARG
    assert [line for line in text.splitlines() if line.startswith("ARG ")] == [
        "ARG PIP_INDEX_URL",
        "ARG PIP_EXTRA_INDEX_URL",
        "ARG TRAINWIZ_FLASH_ATTN_INDEX_URL",
    ]
    runs = [json.loads(line[4:]) for line in text.splitlines() if line.startswith("RUN ")]
    pip_runs = [r for r in runs if "pip" in r or any("flash_attn.py" in a for a in r)]
    assert len(pip_runs) == 2  # FastChat + the pins, then flash-attn through its own index
    assert pip_runs[1][1:3] == ["-c", FLASH_ATTN_INDEX_SWAP]
    for argv in pip_runs:
        at = argv.index("--trusted-host")
        assert argv[at : at + 2] == ["--trusted-host", "127.0.0.1"], argv
    assert not any("--index-url" in r or "--extra-index-url" in r for r in runs)
    notes = plan.indexes.notes()  # what `env build` adds to its notes
    assert sum("build-time proxy" in note for note in notes) == 3
    assert not any(s in " ".join(notes) for s in (PASSWORD, FA_PASSWORD, TOKEN))


def test_tag_ignores_the_password_and_the_proxy_port_but_not_the_index() -> None:
    tag = env_tag_for(_plan(secret_preset()))
    assert env_tag_for(_plan(secret_preset())) == tag  # nothing random (no port) in the inputs
    rotated = secret_preset(pip_index_url="https://bob:another-password@pypi.example.com/simple")
    assert env_tag_for(_plan(rotated)) == tag  # a new password builds the same environment
    moved = secret_preset(pip_index_url=f"https://bob:{PASSWORD}@other.example.com/simple")
    assert env_tag_for(_plan(moved)) != tag


@pytest.mark.parametrize(
    ("field", "environment"),
    [
        ("environment.pip_index_url", {"pip_index_url": f"http://bob:{PASSWORD}@m.example/s"}),
        ("environment.pip_extra_index_urls", {"pip_extra_index_urls": [f"http://{TOKEN}@m/s"]}),
        (
            "environment.flash_attn.index_url",
            {"flash_attn": {"install": "always", "index_url": f"http://f:{PASSWORD}@m/s"}},
        ),
    ],
)
def test_credentials_over_http_are_refused_naming_the_field(
    field: str, environment: dict[str, object]
) -> None:
    base = {"pip_index_url": None, "pip_extra_index_urls": [], "flash_attn": {"install": "never"}}
    with pytest.raises(BadInput) as caught:
        _plan(secret_preset(**{**base, **environment}))
    message = str(caught.value)
    assert message.startswith(field + ":") and "https" in message
    assert PASSWORD not in message and TOKEN not in message


def test_cli_refuses_http_credentials_with_exit_2(tmp_path: Path, capsys) -> None:
    data = secret_preset().model_dump(mode="json", exclude_unset=True)
    data["environment"]["pip_index_url"] = f"http://bob:{PASSWORD}@m.example/simple"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    assert main(["env", "dockerfile", str(path)]) == 2
    err = capsys.readouterr().err
    assert "environment.pip_index_url" in err and PASSWORD not in err
    assert time.monotonic() - started < 5


def test_host_pip_gets_the_index_in_its_environment_not_argv() -> None:
    plan = _plan(secret_preset())
    commands = _pip_commands(plan, "/venv/bin/python")
    assert len(commands) == 5  # pip, torch, FastChat + pins, flash-attn deps, flash-attn
    for argv, _env in commands:
        assert not any(s in " ".join(argv) for s in (PASSWORD, FA_PASSWORD, TOKEN)), argv
        assert "--index-url" not in argv and "--extra-index-url" not in argv
    *common, (fa_argv, fa_env) = commands
    assert fa_argv[-1] == "flash-attn" and fa_env == {
        "PIP_INDEX_URL": f"https://f:{FA_PASSWORD}@fa.example/s"
    }
    assert common[0][1] == {
        "PIP_INDEX_URL": f"https://bob:{PASSWORD}@pypi.example.com/simple",
        "PIP_EXTRA_INDEX_URL": f"https://{TOKEN}@extra.example.com/simple",
    }


@pytest.fixture()
def index(tmp_path: Path):
    build_wheel(tmp_path / "wheels", name="twsecret_probe", version="1.0")
    server = AuthIndex(tmp_path / "wheels", "bob", PASSWORD, absolute=True)
    yield server
    server.stop()


def _watch_cmdlines(marker: str, stop: threading.Event, seen: dict[int, tuple[str, str]]) -> None:
    """Every process whose argv mentions ``marker``: its argv and environment, read from /proc
    while it runs (what any user of the host could read of the argv)."""
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace")
                if marker in argv and int(entry.name) not in seen:
                    environ = (entry / "environ").read_bytes().decode(errors="replace")
                    seen[int(entry.name)] = (argv, environ)
            except OSError:
                continue
        time.sleep(0.01)


def test_host_pip_installs_through_the_private_index_with_no_secret_in_argv(
    index: AuthIndex, tmp_path: Path
) -> None:
    preset = secret_preset(
        pip_index_url=index.url("bob", PASSWORD),
        pip_extra_index_urls=[],
        pip_cert=str(TLS_DIR / "ca.crt"),
        flash_attn={"install": "never"},
    )
    plan = _plan(preset)
    [(argv, env), *_] = _pip_commands(plan, sys.executable)  # the venv build's first command
    target = tmp_path / "site"
    # The same options and environment, installing only the probe into a folder of its own.
    argv = [*argv[: argv.index("--upgrade")], "--no-deps", "--target", str(target)]
    argv.append("twsecret-probe==1.0")
    seen: dict[int, tuple[str, str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_cmdlines, args=(str(target), stop, seen))
    watcher.start()
    lines: list[str] = []
    try:
        # SSL_CERT_FILE as well: pip >= 24.2 verifies through truststore, which ignores --cert.
        trust = {"SSL_CERT_FILE": str(ca_bundle(tmp_path))}
        code = _run(argv, lines, None, None, {**os.environ, **NO_PROXY_ENV, **trust, **env})
    finally:
        stop.set()
        watcher.join()
    assert code == 0, "\n".join(lines)
    assert (target / "twsecret_probe.py").is_file()
    assert index.authorised_files() == ["/files/twsecret_probe-1.0-py3-none-any.whl"]
    assert seen, "pip ran too briefly to be seen in /proc"
    for cmdline, environ in seen.values():
        assert PASSWORD not in cmdline
        assert PASSWORD in environ  # where it was: readable by this user only (mode 0400)
    assert not any(PASSWORD in line for line in lines)


def _get(url: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=10) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_proxy_adds_the_credentials_only_for_the_configured_origin(index: AuthIndex) -> None:
    plan = _plan(
        secret_preset(
            pip_index_url=index.url("bob", PASSWORD),
            pip_extra_index_urls=[],
            pip_cert=str(TLS_DIR / "ca.crt"),
            flash_attn={"install": "never"},
        )
    )
    with index_proxy(plan.indexes, plan.pip_cert) as proxy:
        args = plan.indexes.build_arg_values(proxy.base)
        assert args == {"PIP_INDEX_URL": f"{proxy.base}/o0/simple"}
        status, page, _ = _get(f"{proxy.base}/o0/simple/twsecret-probe/")
        assert status == 200
        # The absolute https link to the private origin now points at the proxy.
        assert f'href="{proxy.base}/o0/files/twsecret_probe-1.0' in page.decode()
        assert index.origin not in page.decode()
        status, wheel, _ = _get(f"{proxy.base}/o0/files/twsecret_probe-1.0-py3-none-any.whl")
        assert status == 200 and wheel[:2] == b"PK"
        status, _, headers = _get(f"{proxy.base}/o0/moved")
        assert status == 302 and headers["Location"] == f"{proxy.base}/o0/simple/"
        assert _get(f"{proxy.base}/o1/simple/")[0] == 404  # no such origin
        assert _get(f"{proxy.base}/https://example.com/")[0] == 404
        assert _get(f"{proxy.base}/o0/simple/", method="POST")[0] == 405
        assert proxy.refused == 3
        served = [p for _, p, ok in index.log if ok]
        assert served == [
            "/simple/twsecret-probe/",
            "/files/twsecret_probe-1.0-py3-none-any.whl",
            "/moved",
        ]
    with pytest.raises(OSError):  # stopped with the block: the port is closed
        _get(f"{proxy.base}/o0/simple/")


def test_peer_uid_finds_this_process() -> None:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    try:
        assert peer_uid(client.getsockname(), server.getsockname()) == os.getuid()
        assert peer_uid(("127.0.0.1", 1), server.getsockname()) is None
    finally:
        client.close()
        server.close()


def test_pip_installs_through_the_proxy_without_knowing_the_credentials(
    index: AuthIndex, tmp_path: Path
) -> None:
    """What the image build does: plain http to the proxy, ``--trusted-host 127.0.0.1``."""
    plan = _plan(
        secret_preset(
            pip_index_url=index.url("bob", PASSWORD),
            pip_extra_index_urls=[],
            pip_cert=str(TLS_DIR / "ca.crt"),
            flash_attn={"install": "never"},
        )
    )
    target = tmp_path / "site"
    with index_proxy(plan.indexes, plan.pip_cert) as proxy:
        env = {**os.environ, **NO_PROXY_ENV, **plan.indexes.build_arg_values(proxy.base)}
        env.pop("PIP_CERT", None)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--isolated",
                *plan.pip_args,
                "--no-deps",
                "--index-url",
                env["PIP_INDEX_URL"],
                "--target",
                str(target),
                "twsecret-probe",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "twsecret_probe.py").is_file()
    assert PASSWORD not in done.stdout + done.stderr


def test_the_plan_says_the_index_goes_through_the_build_proxy() -> None:
    from backend.plan import build_plan

    preset = secret_preset(flash_attn={"install": "never"})
    plan = build_plan(preset)
    assert "build-time proxy on 127.0.0.1" in plan.step("environment").note
    assert PASSWORD not in plan.to_json() and TOKEN not in plan.to_json()


def test_a_remote_docker_daemon_cannot_reach_the_proxy_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from backend.errors import TrainwizError
    from backend.images.build import _build_args

    monkeypatch.setenv("DOCKER_HOST", "tcp://10.9.8.7:2375")
    plan = _plan(secret_preset(pip_index_url=None))
    with pytest.raises(TrainwizError) as caught, _build_args(plan):
        pass
    assert str(caught.value).startswith("environment.pip_extra_index_urls: ")
    assert "DOCKER_HOST=tcp://10.9.8.7:2375" in str(caught.value)


def test_in_container_setup_keeps_the_mirror_password_out_of_pip_argv() -> None:
    """The seed's in_container mode execs ``pip install ... -i MIRROR`` into the container: a
    password in that argv would be in /proc/<pid>/cmdline for every user of the host. It goes
    to pip's environment (docker exec -e), and the printed plan shows the name only."""
    from backend.plan import build_plan
    from backend.plan.setup_steps import in_container_setup
    from backend.preset import load_preset

    preset = load_preset("vicuna-13b-v1.3-8xa100").model_copy(deep=True)
    assert preset.environment.mode == "in_container"
    preset.environment.pip_index_url = "https://bob:S3CRET-in-container@mirror.example/simple"
    steps = in_container_setup(preset)
    pip_steps = [s for s in steps if s.argv[:2] == ["pip", "install"]]
    assert pip_steps
    for step in steps:
        assert "S3CRET-in-container" not in " ".join(step.argv)
    for step in pip_steps:
        assert step.env["PIP_INDEX_URL"] == preset.environment.pip_index_url
    plan = build_plan(preset)
    shown = "\n".join(s.display() for s in plan.steps)
    assert "S3CRET-in-container" not in shown
    assert "docker exec -e 'PIP_INDEX_URL=<redacted>'" in shown


def test_in_container_setup_without_credentials_keeps_the_seed_s_dash_i() -> None:
    from backend.plan.setup_steps import in_container_setup
    from backend.preset import load_preset

    preset = load_preset("vicuna-13b-v1.3-8xa100")
    fastchat = next(s for s in in_container_setup(preset) if s.id == "setup-fastchat")
    assert fastchat.argv[-2:] == ["-i", "https://pypi.tuna.tsinghua.edu.cn/simple"]
    assert "PIP_INDEX_URL" not in fastchat.env
