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

from pydantic import Field, field_validator, model_validator

from backend.i18n import _
from backend.preset.schema_base import _Strict

Event = Literal["finished", "failed", "loss_nan", "stalled"]
EVENTS: tuple[Event, ...] = ("finished", "failed", "loss_nan", "stalled")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_NEEDS_ENV = ("slack", "feishu", "dingtalk")  # their URL carries the token


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
