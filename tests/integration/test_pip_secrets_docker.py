"""A real image build installs a wheel from a private index that requires basic auth, and the
password is nowhere in the image: not its history, its config, its layers (``docker save``), the
Dockerfile, the build log or any file trainwiz wrote. A second build is a lookup.

The index is tests/backend/authindex.py (https on 127.0.0.1, the throwaway test CA); the build
reaches it through trainwiz's build-time proxy (backend/images/pipproxy.py). The image is built
FROM the Docker tests' own environment image (tiny-cpu's, made once and shared, as in
test_images_docker.py): torch and FastChat are satisfied there, so this build installs only what
goes through the proxy, instead of unpacking torch again (the proxy's per-build port and the
test CA change every layer after them).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from backend.diagnosis.build_log import ensure_env_image
from backend.images.build import build_env_image
from backend.images.dockerfile import render_dockerfile, write_context
from backend.images.plan import plan_environment
from backend.paths import home
from tests.backend.authindex import AuthIndex, ca_bundle
from tests.backend.mirrorservers import build_wheel
from tests.integration.test_images_docker import api, docker_tiny  # noqa: F401 (fixture)

pytestmark = pytest.mark.docker

PASSWORD = "dockerSECRETpw0008"


def _contains(command: list[str], needle: bytes) -> bool:
    """Does the output of ``command`` (streamed: ``docker save`` is gigabytes) hold ``needle``?"""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    tail = b""
    found = False
    while chunk := proc.stdout.read(1 << 20):
        if needle in tail + chunk:
            found = True
        tail = chunk[-len(needle) :]
    assert proc.wait() == 0, command
    return found


@pytest.mark.slow
def test_private_index_password_never_reaches_the_image(
    api,  # noqa: F811
    tmp_path: Path,
) -> None:
    build_wheel(tmp_path / "wheels", name="twsecret_probe", version="1.0")
    base = ensure_env_image(docker_tiny())  # the shared environment image of the Docker tests
    index = AuthIndex(tmp_path / "wheels", "bob", PASSWORD)
    preset = docker_tiny(
        image=base,
        pip_extra_index_urls=[index.url("bob", PASSWORD)],
        pip_cert=str(ca_bundle(tmp_path)),  # the proxy trusts the test CA, the build PyPI's
        extra_packages=["accelerate", "einops", "twsecret-probe==1.0"],
    )
    plan = plan_environment(preset)
    assert plan.indexes.needs_proxy
    tag = None
    try:
        first = build_env_image(preset, force=True)
        tag = first.tag
        assert first.ok, "\n".join(first.log_tail)
        assert not first.cached
        assert any("build-time proxy on 127.0.0.1" in note for note in first.notes)
        assert "/files/twsecret_probe-1.0-py3-none-any.whl" in index.authorised_files()
        out = api.containers.run(
            tag,
            ["python3", "-c", "import twsecret_probe; print(twsecret_probe.VALUE)"],
            remove=True,
            network_disabled=True,
        )
        assert out == b"served through the mirror\n"
        needle = PASSWORD.encode()
        assert not _contains(["docker", "history", "--no-trunc", tag], needle)
        assert not _contains(["docker", "image", "inspect", tag], needle)
        assert not _contains(["docker", "save", tag], needle)
        # The image's own env points at no dead proxy: the ARGs were for the build only.
        env = api.images.get(tag).attrs["Config"]["Env"] or []
        assert not any(e.startswith(("PIP_INDEX_URL=", "PIP_EXTRA_INDEX_URL=")) for e in env)
        assert PASSWORD not in render_dockerfile(plan)
        context = write_context(plan, tmp_path / "context")
        for path in context.rglob("*"):
            assert path.is_dir() or needle not in path.read_bytes(), path
        written = [p for p in home().rglob("*") if p.is_file()]
        assert any(p.suffix == ".log" for p in written)  # the build log is among them
        for path in written:
            assert needle not in path.read_bytes(), path
        second = build_env_image(preset)
        assert second.ok and second.cached and second.tag == tag
    finally:
        index.stop()
        if tag and os.environ.get("TRAINWIZ_KEEP_TEST_IMAGES") != "1":
            subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)
