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
from backend.i18n import _
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
            "error": "" if path.exists() else _("{path} missing").format(path=path),
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
    detail = f"HEAD {url}: {error}\n" + (
        _("proxy: {proxy}").format(proxy=proxy) if proxy else _("no HTTPS_PROXY set")
    )
    return finding(
        ctx.severity("fail"),
        _("{what} unreachable: {error}").format(what=what, error=error),
        detail=detail,
        why=why,
        fix=fix,
        blocks=blocks,
        data={"url": url, "error": error},
    )


def check_hf(ctx: CheckContext) -> CheckResult:
    preset = ctx.preset
    endpoint = ctx.targets.hf_endpoint.rstrip("/")
    why = _("The model is downloaded from this endpoint.")
    if preset is not None and preset.model.source not in ("hf", "git_lfs"):
        return finding(
            "skip",
            _("not needed: model source is {source}").format(source=preset.model.source),
            why=why,
        )
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
            _("Hugging Face endpoint"),
            url,
            answer["error"],
            why,
            _(
                "check the network or proxy (HTTPS_PROXY); in China set model.endpoint: "
                "https://hf-mirror.com; or copy the weights and use model.source: local"
            ),
            ["model"],
        )
    status = answer["status"]
    if status in (401, 403) and preset is not None:
        return finding(
            "fail",
            _("{repo} is gated or private (HTTP {status})").format(
                repo=preset.model.repo, status=status
            ),
            why=why,
            detail=f"HEAD {url}",
            blocks=["model"],
            data=data,
            fix=_("{withheld} (the token is read from {env})").format(
                withheld=withheld, env=preset.model.token_env
            )
            if withheld
            else _("accept the licence on the model page, then export {env}=<token>").format(
                env=preset.model.token_env
            ),
        )
    if status == 404 and preset is not None:
        return finding(
            "fail",
            _("{repo}@{revision} not found (HTTP 404)").format(
                repo=preset.model.repo, revision=preset.model.revision
            ),
            detail=f"HEAD {url}",
            why=why,
            fix=_("check model.repo and model.revision"),
            blocks=["model"],
            data=data,
        )
    if status is not None and status >= 500:
        return finding(
            "warn",
            _("{endpoint} answers HTTP {status}").format(endpoint=endpoint, status=status),
            detail=f"HEAD {url}",
            why=why,
            data=data,
        )
    note = f"\n{withheld}" if withheld else ""
    return finding(
        "ok",
        _("{url} reachable (HTTP {status})").format(url=redact_url(endpoint), status=status),
        detail=f"HEAD {url}{note}",
        why=why,
        data=data,
    )


def check_pip(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    index = ctx.targets.pip_index.rstrip("/") + "/"
    why = _("FastChat, transformers and flash-attn are installed from this index.")
    if ctx.judged and needs.runner == "host" and needs.host_venv:
        return finding(
            "skip", _("not needed: environment.venv names an existing environment"), why=why
        )
    answer = head(index, ctx.targets.network_timeout_s)
    if not answer["ok"]:
        return _unreachable(
            ctx,
            _("pip index"),
            index,
            answer["error"],
            why,
            _(
                "set environment.pip_index_url to a reachable mirror "
                "(e.g. https://pypi.tuna.tsinghua.edu.cn/simple) or fix the proxy"
            ),
            ["image"],
        )
    shown = redact_url(index)
    return finding(
        "ok",
        (
            _("{url} reachable (HTTP {status})").format(url=shown, status=answer["status"])
            if answer["status"]
            else _("{url} reachable").format(url=shown)
        ),
        why=why,
        data={"url": shown, "status": answer["status"]},
    )


def check_registry(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    url = ctx.targets.registry_url
    why = _("The base image is pulled from this registry.")
    if ctx.judged and needs.runner != "docker":
        return finding("skip", _("not needed: this preset runs on the host"), why=why)
    if not url:
        return finding("skip", _("no registry to check"), why=why)
    answer = head(url, ctx.targets.network_timeout_s)
    if answer["ok"]:
        return finding(
            "ok",
            _("{url} reachable (HTTP {status})").format(url=url, status=answer["status"]),
            why=why,
            data={"url": url, "status": answer["status"]},
        )
    local = ctx.judged and bool(docker_facts(ctx).get("image_local"))
    if local:
        return finding(
            "warn",
            _("registry unreachable ({error}), but {image} is already local").format(
                error=answer["error"], image=needs.image
            ),
            detail=f"HEAD {url}",
            why=why,
            data={"url": url, "error": answer["error"]},
        )
    return _unreachable(
        ctx,
        _("image registry"),
        url,
        answer["error"],
        why,
        _(
            'configure a registry mirror ("registry-mirrors" in /etc/docker/daemon.json), '
            "or `docker load` the image from a tar made elsewhere"
        ),
        ["image"],
    )
