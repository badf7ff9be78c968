"""Can this machine reach the Hub endpoint, the pip index and the image registry?

One HEAD request each with a short timeout; any HTTP answer (even 401 from a registry that
wants a login) proves the route works. Proxies come from the usual environment variables, and
the URLs from the preset (a mirror such as hf-mirror.com or a Tsinghua pip index).
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from backend.checks.context import CheckContext
from backend.checks.docker_checks import docker_facts
from backend.checks.model import CheckResult, Step, finding
from backend.redact import redact_text, redact_url
from backend.tokens import decide


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect proves the server answered; following it would test a CDN instead."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def head(url: str, timeout: float, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """{'ok': bool, 'status': int | None, 'error': str}: did a server answer at all?"""
    if url.startswith("file://"):
        path = Path(url[len("file://") :])
        return {
            "ok": path.exists(),
            "status": None,
            "error": "" if path.exists() else f"{path} missing",
        }
    request = urllib.request.Request(url, method="HEAD", headers=headers or {})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return {"ok": True, "status": response.status, "error": ""}
    except urllib.error.HTTPError as exc:
        return {"ok": True, "status": exc.code, "error": ""}
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            return {"ok": False, "status": None, "error": f"TLS: {reason}"}
        return {"ok": False, "status": None, "error": str(reason)}
    except (TimeoutError, OSError, ValueError) as exc:
        return {"ok": False, "status": None, "error": str(exc) or type(exc).__name__}


def _unreachable(
    ctx: CheckContext, what: str, url: str, error: str, why: str, fix: str, blocks: list[Step]
) -> CheckResult:
    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy") if k in os.environ), None)
    url, error = redact_url(url), redact_text(error)
    proxy = redact_url(proxy) if proxy else None
    detail = f"HEAD {url}: {error}" + (f"\nproxy: {proxy}" if proxy else "\nno HTTPS_PROXY set")
    return finding(
        ctx.severity("fail"),
        f"{what} unreachable: {error}",
        detail=detail,
        why=why,
        fix=fix,
        blocks=blocks,
        data={"url": url, "error": error},
    )


def check_hf(ctx: CheckContext) -> CheckResult:
    preset = ctx.preset
    endpoint = ctx.targets.hf_endpoint.rstrip("/")
    why = "The model is downloaded from this endpoint."
    if preset is not None and preset.model.source not in ("hf", "git_lfs"):
        return finding("skip", f"not needed: model source is {preset.model.source}", why=why)
    url = endpoint + "/"
    headers: dict[str, str] = {}
    withheld = ""
    if preset is not None and preset.model.repo:
        url = f"{endpoint}/{preset.model.repo}/resolve/{preset.model.revision}/config.json"
        decision = decide(endpoint, preset.model.token_env)
        withheld = decision.reason
        if decision.send and decision.token:  # sent, never recorded
            headers["Authorization"] = f"Bearer {decision.token}"
    answer = head(url, ctx.targets.network_timeout_s, headers)
    url = redact_url(url)
    data = {"url": url, "status": answer["status"]}
    if not answer["ok"]:
        return _unreachable(
            ctx,
            "Hugging Face endpoint",
            url,
            answer["error"],
            why,
            "check the network or proxy (HTTPS_PROXY); in China set model.endpoint: "
            "https://hf-mirror.com; or copy the weights and use model.source: local",
            ["model"],
        )
    status = answer["status"]
    if status in (401, 403) and preset is not None:
        return finding(
            "fail",
            f"{preset.model.repo} is gated or private (HTTP {status})",
            why=why,
            detail=f"HEAD {url}",
            blocks=["model"],
            data=data,
            fix=f"{withheld} (the token is read from {preset.model.token_env})"
            if withheld
            else f"accept the licence on the model page, then export {preset.model.token_env}=<token>",
        )
    if status == 404 and preset is not None:
        return finding(
            "fail",
            f"{preset.model.repo}@{preset.model.revision} not found (HTTP 404)",
            detail=f"HEAD {url}",
            why=why,
            fix="check model.repo and model.revision",
            blocks=["model"],
            data=data,
        )
    if status is not None and status >= 500:
        return finding(
            "warn", f"{endpoint} answers HTTP {status}", detail=f"HEAD {url}", why=why, data=data
        )
    note = f"\n{withheld}" if withheld else ""
    return finding(
        "ok",
        f"{redact_url(endpoint)} reachable (HTTP {status})",
        detail=f"HEAD {url}{note}",
        why=why,
        data=data,
    )


def check_pip(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    index = ctx.targets.pip_index.rstrip("/") + "/"
    why = "FastChat, transformers and flash-attn are installed from this index."
    if ctx.judged and needs.runner == "host" and needs.host_venv:
        return finding(
            "skip", "not needed: environment.venv names an existing environment", why=why
        )
    answer = head(index, ctx.targets.network_timeout_s)
    if not answer["ok"]:
        return _unreachable(
            ctx,
            "pip index",
            index,
            answer["error"],
            why,
            "set environment.pip_index_url to a reachable mirror "
            "(e.g. https://pypi.tuna.tsinghua.edu.cn/simple) or fix the proxy",
            ["image"],
        )
    shown = redact_url(index)
    return finding(
        "ok",
        f"{shown} reachable" + (f" (HTTP {answer['status']})" if answer["status"] else ""),
        why=why,
        data={"url": shown, "status": answer["status"]},
    )


def check_registry(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    url = ctx.targets.registry_url
    why = "The base image is pulled from this registry."
    if ctx.judged and needs.runner != "docker":
        return finding("skip", "not needed: this preset runs on the host", why=why)
    if not url:
        return finding("skip", "no registry to check", why=why)
    answer = head(url, ctx.targets.network_timeout_s)
    if answer["ok"]:
        return finding(
            "ok",
            f"{url} reachable (HTTP {answer['status']})",
            why=why,
            data={"url": url, "status": answer["status"]},
        )
    local = ctx.judged and bool(docker_facts(ctx).get("image_local"))
    if local:
        return finding(
            "warn",
            f"registry unreachable ({answer['error']}), but {needs.image} is already local",
            detail=f"HEAD {url}",
            why=why,
            data={"url": url, "error": answer["error"]},
        )
    return _unreachable(
        ctx,
        "image registry",
        url,
        answer["error"],
        why,
        'configure a registry mirror ("registry-mirrors" in /etc/docker/daemon.json), '
        "or `docker load` the image from a tar made elsewhere",
        ["image"],
    )
