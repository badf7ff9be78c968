"""The real Docker daemon pulls the plan's image name from the mirror registry the probe chose.

The mirror is tests/integration/test_images_docker.py's loopback Registry v2 (one busybox
image, which dockerd treats as an insecure registry because it is on 127.0.0.1); the other
candidates are a black hole and a registry answering 503, listed before it.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from backend.checks import run_checks
from backend.mirrors import apply_mirrors
from backend.mirrors.probe import clear_cache
from backend.plan import build_plan
from backend.preset.loader import parse_preset_text
from tests.backend.mirrorservers import BlackHole, Server, loopback_only, registry_root_handler
from tests.integration.test_images_docker import ROOT, api, registry  # noqa: F401 (fixtures)

pytestmark = pytest.mark.docker


def test_docker_pulls_the_plans_image_name_from_the_probed_mirror(
    api,  # noqa: F811
    registry,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loopback_only(monkeypatch)
    address, _ = registry
    broken = Server(registry_root_handler(), status=503)
    hole = BlackHole()
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["runner"] = "docker"
    data["environment"] = {"mode": "in_container", "image": "trainwiz/busybox:1"}
    data["mirrors"] = {
        "profile": "custom",
        "custom": {"registry": [hole.url, broken.url, f"http://{address}"]},
        "probe_timeout_s": 0.6,
    }
    preset = parse_preset_text(yaml.safe_dump(data))
    mirrored = f"{address}/trainwiz/busybox:1"
    try:
        resolved = apply_mirrors(preset)
        assert resolved.environment.image == mirrored
        pull = build_plan(resolved).step("image")
        assert pull.argv == ["docker", "pull", mirrored]
        # The exact command the plan prints, run by the real docker CLI against the real daemon.
        done = subprocess.run(pull.argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        out = api.containers.run(
            mirrored, ["/bin/busybox", "cat", "/etc/trainwiz-test"], remove=True
        )
        assert out == b"rootfs ok\n"
        # Now local: a fresh probe round keeps the name as written (nothing to pull).
        clear_cache()
        local = preset.model_copy(
            update={"environment": preset.environment.model_copy(update={"image": mirrored})}
        )
        assert apply_mirrors(local).environment.image == mirrored
        # `check` reports the daemon's registry-mirrors next to the choice.
        [result] = run_checks(preset, only=["mirrors"])
        assert result.status == "ok", result
        assert result.data["registry_mirrors"] == [
            str(m) for m in (api.info().get("RegistryConfig") or {}).get("Mirrors") or []
        ]
        assert f"registry → http://{address}" in result.summary
    finally:
        api.images.remove(mirrored, force=True)
        broken.stop()
        hole.stop()
