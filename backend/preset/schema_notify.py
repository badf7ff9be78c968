"""The preset's ``notify:`` block: webhooks told when a run finishes, fails, goes NaN or stalls.

A webhook URL is a credential (Slack, Feishu and DingTalk put the token in it), so a preset
never holds one in clear for those kinds: ``url_env`` names the environment variable the
watcher reads it from when it sends. A generic JSON endpoint may be written as ``url`` (https,
no userinfo) and name its secret header in ``token_env``. Feishu and DingTalk "signed" bots
take their signing secret from ``secret_env``. Sending happens in ``backend/runs/notify.py``.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from backend.i18n import _
from backend.preset.hostpaths import ca_bundle_problem
from backend.preset.schema_base import _Strict
from backend.redact import secret_query_names

# sweep_finished: a sweep's variants all ended (sent by the queue's scheduler, docs/queue.md)
Event = Literal["finished", "failed", "loss_nan", "stalled", "sweep_finished"]
EVENTS: tuple[Event, ...] = ("finished", "failed", "loss_nan", "stalled", "sweep_finished")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_NEEDS_ENV = ("slack", "feishu", "dingtalk")  # their URL carries the token
# Validation context key: check the files a preset names on this host (the loader sets it for a
# preset the user gives; a run's own record, read later or elsewhere, is not checked again).
HOST_FILES = "host_files"


def check_https(url: str, where: str) -> str:
    """An https URL with a host and no user:password part (else a ValueError naming ``where``)."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(
            _("{where}: webhooks are sent over https only: use an https:// URL").format(where=where)
        )
    if parts.username or parts.password:
        raise ValueError(
            _("{where}: no user:password in the URL: put the secret in token_env").format(
                where=where
            )
        )
    return url


def check_no_secret(url: str) -> str:
    """A URL the preset holds in clear carries no secret: not ``user:password@``, not a
    ``?token=`` / ``key`` / ``sig`` ... parameter (the run's preset.yaml, a saved preset and
    every message quoting it would repeat it)."""
    parts = urlsplit(url)
    found = ["user:password@"] if parts.username or parts.password else []
    found += [f"{name}=" for name in secret_query_names(url)]
    if found:
        raise ValueError(
            _(
                "the URL carries a secret ({what}): put the secret in an environment variable "
                "and name it with token_env (sent as 'Authorization: Bearer …'), or put the whole "
                "URL in one and name that with url_env"
            ).format(what=", ".join(found))
        )
    return url


class Webhook(_Strict):
    kind: Literal["slack", "feishu", "dingtalk", "generic"] = Field(
        ..., description="payload shape: Slack/Feishu/DingTalk bot message, or generic JSON"
    )
    url_env: str | None = Field(None, description="environment variable holding the https URL")
    url: str | None = Field(None, description="generic only: the https URL (no secret in it)")
    token_env: str | None = Field(
        None, description="generic: env var sent as 'Authorization: Bearer …'"
    )
    secret_env: str | None = Field(None, description="feishu/dingtalk: signing secret's env var")
    events: list[Event] = Field(default_factory=lambda: list(EVENTS), description="what to send")

    @field_validator("url_env", "token_env", "secret_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                _("'{value}' is not an environment variable name (letters, digits, _)").format(
                    value=value
                )
            )
        return value

    @field_validator("url")
    @classmethod
    def _no_secret(cls, value: str | None) -> str | None:
        return check_no_secret(value) if value is not None else None

    @model_validator(mode="after")
    def _one_source(self) -> Webhook:
        if self.url is not None:
            if self.kind in _NEEDS_ENV:
                raise ValueError(
                    _(
                        "notify: a {kind} webhook URL holds its token: put it in an environment "
                        "variable and name it in url_env, not url"
                    ).format(kind=self.kind)
                )
            check_https(self.url, "notify.webhooks.url")
        if (self.url is None) == (self.url_env is None):
            raise ValueError(_("notify: give a webhook exactly one of url_env or url"))
        if self.secret_env and self.kind not in ("feishu", "dingtalk"):
            raise ValueError(_("notify: secret_env signs feishu and dingtalk messages only"))
        return self


class NotifySettings(_Strict):
    webhooks: list[Webhook] = Field(default_factory=list, max_length=16)
    stalled_minutes: float = Field(
        30.0, gt=0, le=24 * 60, description="'stalled': no training step for this long"
    )
    ca_file: str | None = Field(
        None, description="a CA bundle to trust for the webhooks (a private endpoint)"
    )

    @field_validator("ca_file")
    @classmethod
    def _ca_bundle(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A PEM bundle, checked where the preset is given (plan, check, launch): the watcher
        reads it only when the run ends, when a bad one can no longer be fixed."""
        if value is None:
            return None
        if not value.strip() or (info.context or {}).get(HOST_FILES):
            problem = ca_bundle_problem(value)
            if problem:
                raise ValueError(problem)
        return value
