"""Where the Hugging Face token may go: https only, to hosts the user trusts.

A preset names the endpoint (``model.endpoint``) and the variable holding the token
(``model.token_env``), and presets are passed around. So neither decides alone:

- the token is sent only over **https** and only to a host on the trusted list: the Hub
  (``huggingface.co`` and its subdomains) and the named mirror ``hf-mirror.com``, plus hosts the
  *user* adds in the environment variable ``TRAINWIZ_TOKEN_HOSTS`` (comma-separated ``host`` or
  ``host:port``; a preset cannot add hosts). Plain ``http://`` never gets a token, not even from
  a listed host or 127.0.0.1: a loopback test server that needs a token must speak TLS.
- ``token_env`` must look like a token variable (``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, any
  ``*_TOKEN``) or be confirmed by the user in ``TRAINWIZ_TOKEN_ENVS`` (comma-separated names);
  otherwise the variable is not read at all (``token_env: AWS_SECRET_ACCESS_KEY`` sends nothing).

When the token is withheld the request still goes out, anonymously (a public repo on a mirror
works), and huggingface_hub is told not to fall back to HF_TOKEN or the cached login
(``token=False``); the reason is kept so a 401 can explain what to change.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

TOKEN_HOSTS_ENV = "TRAINWIZ_TOKEN_HOSTS"
TOKEN_ENVS_ENV = "TRAINWIZ_TOKEN_ENVS"
DEFAULT_TOKEN_HOSTS = ("huggingface.co", "hf-mirror.com")
_TOKEN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*_TOKEN|HF_TOKEN", re.IGNORECASE)
# Variables huggingface_hub reads by itself; removed from a child's environment unless allowed.
HUB_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


@dataclass(frozen=True)
class TokenDecision:
    """Whether the token may be sent to an endpoint, the token itself, and why not."""

    send: bool
    token: str | None
    reason: str = ""

    def hub_token(self) -> str | bool | None:
        """The ``token=`` argument for huggingface_hub: the token, the cached login, or none."""
        if not self.send:
            return False
        return self.token or None


def _listed(name: str) -> set[str]:
    return {part.strip().lower() for part in os.environ.get(name, "").split(",") if part.strip()}


def trusted_hosts() -> list[str]:
    return [*DEFAULT_TOKEN_HOSTS, *sorted(_listed(TOKEN_HOSTS_ENV))]


def host_trusted(endpoint: str) -> tuple[bool, str]:
    """(may a token go to ``endpoint``?, why not)."""
    try:
        parts = urlsplit(endpoint)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return False, f"{endpoint!r} is not a URL"
    if parts.scheme != "https":
        return False, f"{parts.scheme or 'no scheme'}:// is not https (tokens go only over TLS)"
    for entry in trusted_hosts():
        want_host, _, want_port = entry.partition(":")
        host_ok = host == want_host or host.endswith("." + want_host)
        if host_ok and (not want_port or str(port or 443) == want_port):
            return True, ""
    return False, (
        f"{host} is not a trusted token host ({', '.join(trusted_hosts())}); "
        f"to trust it add it to {TOKEN_HOSTS_ENV}"
    )


def token_env_allowed(name: str) -> bool:
    return bool(_TOKEN_NAME.fullmatch(name)) or name.lower() in _listed(TOKEN_ENVS_ENV)


def decide(endpoint: str, token_env: str) -> TokenDecision:
    """May the token named by ``token_env`` be sent to ``endpoint``? Reads it only if so."""
    if not token_env_allowed(token_env):
        return TokenDecision(
            False,
            None,
            f"model.token_env {token_env} does not look like a token variable (HF_TOKEN, "
            f"*_TOKEN); it was not read: rename it, or confirm it with {TOKEN_ENVS_ENV}={token_env}",
        )
    ok, why = host_trusted(endpoint)
    if not ok:
        return TokenDecision(False, None, f"token not sent: {why}")
    return TokenDecision(True, os.environ.get(token_env) or None)


def child_env(decision: TokenDecision, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a huggingface_hub child: the token only if ``decision`` allows it."""
    env = dict(os.environ if base is None else base)
    for var in HUB_TOKEN_VARS:
        env.pop(var, None)
    if decision.send and decision.token:
        env["HF_TOKEN"] = decision.token  # environment only: never argv, never a file
    if not decision.send:
        env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    return env


def allow_hosts(hosts: list[str]) -> None:
    """Add hosts the user named on the command line (``--token-host``) to this process's list
    (and so to its children's): the CLI equivalent of ``TRAINWIZ_TOKEN_HOSTS``."""
    if hosts:
        merged = sorted(_listed(TOKEN_HOSTS_ENV) | {h.strip().lower() for h in hosts if h.strip()})
        os.environ[TOKEN_HOSTS_ENV] = ",".join(merged)
