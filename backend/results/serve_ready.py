"""Is a serve's stack ready: the questions ``serve.start`` asks its three servers while they start.

All are asked on this machine and never through a proxy from the environment. The API listing
the model is not enough on its own: the controller's and worker's loopback ports are picked free
and bound a moment later by the server, so another process can take one in between; FastChat's
servers live on after a failed bind (their heartbeat thread), and its worker registers its
address with the controller before binding it, so the API would list the model and answer
through whatever holds that port (another serve of a run of the same name lists it too).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

IN_USE = b"address already in use"  # uvicorn's "[Errno 98] error while attempting to bind ..."


def api_lists(base_url: str, api_key: str | None, model: str) -> bool:
    """The API lists the model, asked where it listens (``base_url``: 127.0.0.2 as given, :: as
    ::1)."""
    request = urllib.request.Request(f"{base_url}/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    data = _ask_json(request)
    return any(m.get("id") == model for m in data.get("data") or [])


def routed_to(controller: int, worker: int, model: str) -> bool:
    """Our controller sends the model's requests to our worker, and what answers on our
    worker's port serves the model."""
    address = f"http://127.0.0.1:{worker}"
    routed = _ask_json(_post(f"http://127.0.0.1:{controller}/get_worker_address", {"model": model}))
    if routed.get("address") != address:
        return False
    return model in (_ask_json(_post(f"{address}/worker_get_status", {})).get("model_names") or [])


def lost_its_port(log: Path, offset: int) -> bool:
    """What a server wrote to its log since ``offset`` says its bind failed."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            return IN_USE in handle.read().lower()
    except OSError:
        return False


def _post(url: str, body: dict[str, Any]) -> urllib.request.Request:
    headers = {"Content-Type": "application/json"}
    return urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)


def _ask_json(request: urllib.request.Request) -> dict[str, Any]:
    """A JSON object from a server on this machine, or {} while it does not answer one."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(request, timeout=5) as answer:
            data = json.loads(answer.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
