"""Images and the environment image against a real Docker daemon (CI: scripts/ci-docker.sh).

No registry is reachable on CI, so the pull test serves a real image from a small in-process
Registry v2 server on 127.0.0.1 (which dockerd treats as an insecure registry by default).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from backend.images.build import build_env_image
from backend.images.catalog import local_images
from backend.images.docker_client import docker_client
from backend.images.events import BuildStep, LayerProgress
from backend.images.pull import pull_image
from backend.preset.loader import parse_preset_text, save_preset
from backend.preset.schema import Preset
from tui.cli import main

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("TRAINWIZ_BASE_IMAGE", "trainwiz-base:bookworm")
WHEELS = os.environ.get("TRAINWIZ_TEST_WHEELS", "/opt/wheels")
BUSYBOX = shutil.which("busybox") or "/bin/busybox"


@pytest.fixture(scope="module")
def api():
    client = docker_client()  # a TrainwizError (test error, not a skip) when no daemon answers
    try:
        client.images.get(BASE)
    except Exception:
        # The base image is itself imported from a local debootstrap rootfs by this script.
        subprocess.run(["bash", str(ROOT / "scripts" / "ci-docker.sh")], check=True)
    return client


def docker_tiny(**environment: object) -> Preset:
    """tiny-cpu in the local base image, CPU torch from the local wheel, the rest from PyPI."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-docker-env"
    data["launch"]["runner"] = "docker"
    data["environment"] = {
        "mode": "image",
        "image": BASE,
        "torch_spec": "torch==2.13.0",
        "find_links": [WHEELS],
        **environment,
    }
    return parse_preset_text(yaml.safe_dump(data))


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def busybox_rootfs() -> bytes:
    """A one-binary root filesystem: the static busybox and a file to prove the layer arrived."""
    return _tar(
        {
            "bin/busybox": (Path(BUSYBOX).read_bytes(), 0o755),
            "etc/trainwiz-test": (b"rootfs ok\n", 0o644),
        }
    )


def test_base_image_imported_from_a_local_rootfs(api, tmp_path: Path) -> None:
    tarball = tmp_path / "rootfs.tar"
    tarball.write_bytes(busybox_rootfs())
    repo, tag = "trainwiz-test-rootfs", "busybox"
    api.api.import_image_from_file(str(tarball), repository=repo, tag=tag)
    try:
        out = api.containers.run(
            f"{repo}:{tag}", ["/bin/busybox", "cat", "/etc/trainwiz-test"], remove=True
        )
        assert out == b"rootfs ok\n"
        listed = {i.ref: i for i in local_images(api)}
        assert listed[f"{repo}:{tag}"].local and listed[f"{repo}:{tag}"].family == "unknown"
        assert listed[BASE].python == "3.11" and listed[BASE].cuda is None  # catalog facts
    finally:
        api.images.remove(f"{repo}:{tag}", force=True)


class _Registry(BaseHTTPRequestHandler):
    """Just enough of the Registry v2 API for `docker pull`: one manifest, its blobs."""

    blobs: dict[str, bytes] = {}
    manifest: bytes = b""

    def log_message(self, *args: object) -> None:  # quiet test output
        return

    def _send(self, code: int, body: bytes, ctype: str, digest: str | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/v2/":
            self._send(200, b"{}", "application/json")
        elif path.startswith("/v2/trainwiz/busybox/manifests/"):
            digest = "sha256:" + hashlib.sha256(self.manifest).hexdigest()
            mtype = "application/vnd.docker.distribution.manifest.v2+json"
            self._send(200, self.manifest, mtype, digest)
        elif "/blobs/" in path and path.rsplit("/", 1)[1] in self.blobs:
            digest = path.rsplit("/", 1)[1]
            self._send(200, self.blobs[digest], "application/octet-stream", digest)
        else:
            self._send(
                404,
                b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}',
                "application/json",
            )

    do_HEAD = do_GET


@pytest.fixture()
def registry():
    layer_tar = busybox_rootfs()
    layer = gzip.compress(layer_tar)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/busybox", "sh"]},
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
            },
        }
    ).encode()

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    _Registry.blobs = {digest(layer): layer, digest(config): config}
    _Registry.manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": digest(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": digest(layer),
                }
            ],
        }
    ).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", digest(layer)
    server.shutdown()


def test_pull_reports_each_layer(api, registry) -> None:
    address, layer_digest = registry
    ref = f"{address}/trainwiz/busybox:1"
    events: list[LayerProgress] = []
    result = pull_image(
        ref, progress=lambda e: events.append(e) if isinstance(e, LayerProgress) else None
    )
    try:
        assert result.ok, result.error
        short = layer_digest.split(":")[1][:12]
        assert result.layers[short].status == "Pull complete"
        statuses = [e.status for e in events if e.layer == short]
        assert "Downloading" in statuses and statuses[-1] == "Pull complete"
        assert result.digest and result.digest.startswith("sha256:")
        assert (
            api.containers.run(ref, ["/bin/busybox", "cat", "/etc/trainwiz-test"], remove=True)
            == b"rootfs ok\n"
        )
    finally:
        api.images.remove(ref, force=True)


def test_pull_refused_keeps_the_daemons_words(api, registry) -> None:
    address, _ = registry
    result = pull_image(f"{address}/trainwiz/absent:1")
    assert not result.ok
    assert result.error == "manifest unknown"  # the registry's own message, passed through


@pytest.mark.slow
def test_env_image_built_from_base_then_cache_hit(api) -> None:
    preset = docker_tiny()
    steps: list[BuildStep] = []
    first = build_env_image(
        preset, progress=lambda e: steps.append(e) if isinstance(e, BuildStep) else None, force=True
    )
    assert first.ok, "\n".join(first.log_tail)
    assert not first.cached and steps and steps[0].instruction == f"FROM {BASE}"
    out = api.containers.run(
        first.tag,
        [
            "python3",
            "-c",
            "import torch, transformers, fastchat; print(torch.__version__, transformers.__version__, fastchat.__version__)",
        ],
        remove=True,
        network_disabled=True,
    )
    assert out.decode().split() == ["2.13.0+cpu", "4.57.6", "0.2.36"]
    labels = api.images.get(first.tag).labels
    assert labels["org.trainwiz.inputs"] == first.tag.split(":")[1]
    second = build_env_image(preset)
    assert second.ok and second.cached and second.tag == first.tag
    assert second.image_id == api.images.get(first.tag).short_id


@pytest.mark.slow
def test_failed_build_shows_error_line_and_finding(api, tmp_path: Path, capsys) -> None:
    # flash-attn forced onto a CPU image without nvcc: the seed's build failure, for real.
    preset = docker_tiny(flash_attn={"install": "always"})
    path = save_preset(preset, tmp_path / "tiny-flash.yaml")
    code = main(["env", "build", str(path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert "environment image build failed: The command 'python3 /opt/trainwiz/flash_attn.py" in err
    line = next(x for x in err.splitlines() if x.startswith("  line "))
    assert "nvcc" in line or "CUDA_HOME" in line
    assert "[error] flash_attn_build: " in err
    log_path = Path(err.split("full log: ")[1].split()[0])
    assert "building flash-attn with MAX_JOBS=" in log_path.read_text()
