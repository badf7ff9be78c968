"""One place that opens the Docker daemon, so every caller gets the same plain error."""

from __future__ import annotations

from typing import Any

from backend.errors import TrainwizError
from backend.i18n import _


def docker_client(timeout: int = 600) -> Any:
    """A docker SDK client for the local daemon (DOCKER_HOST honoured), or a TrainwizError."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise TrainwizError(
            _(
                "the Docker daemon does not answer ({exc}); start it (sudo systemctl start "
                "docker, or scripts/ci-docker.sh), or use launch.runner: host"
            ).format(exc=exc)
        ) from exc
    return client


def registry_mirrors(client: Any = None) -> list[str]:
    """The daemon's registry mirrors (daemon.json 'registry-mirrors'), shown before a pull."""
    api = client or docker_client()
    info = api.info()
    registry = info.get("RegistryConfig") or {}
    mirrors = registry.get("Mirrors") or []
    return [str(m) for m in mirrors]
