"""The pip indexes an environment installs from, and how each consumer may carry them.

A mirror URL can hold a secret (``https://user:PASSWORD@mirror/simple``). Put on a pip command
line, that secret would be stored in the environment image (every ``RUN`` argv is in the image's
history) or shown to every user of the host (``/proc/<pid>/cmdline``). So the URLs live here, in
one structure, and each consumer takes the form that keeps the secret where the user put it:

- the Dockerfile gets credential-free argv; when any URL carries credentials, every index goes
  through trainwiz's build-time proxy on 127.0.0.1 (``backend.images.pipproxy``) and the build
  sees only the proxy's address, as ``ARG``s (the Dockerfile itself names no port);
- the host venv's pip gets the URLs in its environment (``PIP_INDEX_URL``...), which only the
  same user can read;
- the plan's hash sees the URLs with the password hidden: a hash of a secret is a secret too
  (a weak password falls to a dictionary run against ``org.trainwiz.inputs``).

A secret goes only over https: credentials in an ``http://`` URL are refused, naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from backend.errors import BadInput
from backend.i18n import _
from backend.redact import redact_url

PROXY_HOST = "127.0.0.1"
# The build's ARGs, in the order the Dockerfile declares them. pip reads PIP_* itself; the
# flash-attn index is swapped in for its own step only (dockerfile.py).
ARG_INDEX = "PIP_INDEX_URL"
ARG_EXTRA = "PIP_EXTRA_INDEX_URL"
ARG_FLASH = "TRAINWIZ_FLASH_ATTN_INDEX_URL"


def has_credentials(url: str) -> bool:
    """Does ``url`` carry a user-info part (``user:pass@`` or a bare token ``TOKEN@``)?"""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.netloc) and "@" in parts.netloc


def origin(url: str) -> str:
    """``https://u:p@Host:443/simple`` -> ``https://host:443`` (scheme, host and port only)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def basic_auth(url: str) -> tuple[str, str]:
    """The (user, password) pip would send for ``url``; a bare ``TOKEN@`` is a user, no password."""
    parts = urlsplit(url)
    return unquote(parts.username or ""), unquote(parts.password or "")


def _check_secret_scheme(url: str, field_name: str) -> None:
    if has_credentials(url) and urlsplit(url).scheme != "https":
        raise BadInput(
            _(
                "environment.{field}: {url} carries credentials over {scheme}://; a secret is "
                "sent only over https: give the mirror's https:// URL"
            ).format(field=field_name, url=redact_url(url), scheme=urlsplit(url).scheme)
        )


@dataclass(frozen=True)
class PipIndexes:
    """The preset's index URLs as written (secrets included): never render this directly."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    flash_attn_index_url: str | None = None  # only when the plan builds flash-attn

    @classmethod
    def checked(
        cls,
        index_url: str | None,
        extra_index_urls: list[str],
        trusted_hosts: list[str],
        flash_attn_index_url: str | None,
    ) -> PipIndexes:
        """Refuse credentials over anything but https, naming the field that holds them."""
        if index_url:
            _check_secret_scheme(index_url, "pip_index_url")
        for url in extra_index_urls:
            _check_secret_scheme(url, "pip_extra_index_urls")
        if flash_attn_index_url:
            _check_secret_scheme(flash_attn_index_url, "flash_attn.index_url")
        return cls(index_url, tuple(extra_index_urls), tuple(trusted_hosts), flash_attn_index_url)

    def urls(self) -> list[str]:
        found = [self.index_url, *self.extra_index_urls, self.flash_attn_index_url]
        return [u for u in found if u]

    @property
    def needs_proxy(self) -> bool:
        """A docker build must not see these URLs: one of them carries a secret."""
        return any(has_credentials(u) for u in self.urls())

    def secret_fields(self) -> list[str]:
        """The preset fields whose URL carries credentials (for messages that name the field)."""
        fields = []
        if self.index_url and has_credentials(self.index_url):
            fields.append("environment.pip_index_url")
        if any(has_credentials(u) for u in self.extra_index_urls):
            fields.append("environment.pip_extra_index_urls")
        if self.flash_attn_index_url and has_credentials(self.flash_attn_index_url):
            fields.append("environment.flash_attn.index_url")
        return fields

    def secrets(self) -> list[str]:
        """The passwords/tokens the URLs hold (for scrubbing logs and for the tests' searches)."""
        found = []
        for url in self.urls():
            if has_credentials(url):
                user, password = basic_auth(url)
                found.append(password or user)
        return [s for s in found if s]

    def _trusted_argv(self) -> list[str]:
        args: list[str] = []
        for host in self.trusted_hosts:
            args += ["--trusted-host", host]
        return args

    def argv(self) -> list[str]:
        """pip options as written (used only when no URL carries a secret)."""
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        return args + self._trusted_argv()

    def flash_attn_argv(self) -> list[str]:
        """flash-attn's own index replaces the others (as before); else the common options."""
        if self.flash_attn_index_url:
            return ["--index-url", self.flash_attn_index_url]
        return self.argv()

    def proxy_argv(self) -> list[str]:
        """pip options of a proxied docker build: trust the loopback proxy (any port), no URL."""
        return ["--trusted-host", PROXY_HOST, *self._trusted_argv()]

    def build_args(self) -> list[str]:
        """The ``ARG`` names a proxied Dockerfile declares (the proxy's URLs are their values)."""
        names = []
        if self.index_url:
            names.append(ARG_INDEX)
        if self.extra_index_urls:
            names.append(ARG_EXTRA)
        if self.flash_attn_index_url:
            names.append(ARG_FLASH)
        return names

    def origins(self) -> list[str]:
        """The upstream origins, in first-seen order (the proxy serves route ``o<N>`` for each)."""
        seen: list[str] = []
        for url in self.urls():
            if origin(url) not in seen:
                seen.append(origin(url))
        return seen

    def route_path(self, url: str) -> str:
        """The proxy-relative path for ``url``: ``/o<N>`` + its path (query dropped)."""
        path = urlsplit(url).path or "/"
        return f"/o{self.origins().index(origin(url))}{path}"

    def build_arg_values(self, proxy_base: str) -> dict[str, str]:
        """``ARG`` values for a build whose proxy listens at ``proxy_base`` (http://127.0.0.1:P)."""
        values: dict[str, str] = {}
        if self.index_url:
            values[ARG_INDEX] = proxy_base + self.route_path(self.index_url)
        if self.extra_index_urls:
            values[ARG_EXTRA] = " ".join(
                proxy_base + self.route_path(u) for u in self.extra_index_urls
            )
        if self.flash_attn_index_url:
            values[ARG_FLASH] = proxy_base + self.route_path(self.flash_attn_index_url)
        return values

    def pip_env(self, flash_attn: bool = False) -> dict[str, str]:
        """The host pip's environment for these indexes (readable by this user only, unlike
        argv); flash-attn's own index replaces the others for its step, as in the image."""
        if flash_attn and self.flash_attn_index_url:
            return {ARG_INDEX: self.flash_attn_index_url}
        env: dict[str, str] = {}
        if self.index_url:
            env[ARG_INDEX] = self.index_url
        if self.extra_index_urls:
            env[ARG_EXTRA] = " ".join(self.extra_index_urls)
        return env

    def host_argv(self, flash_attn: bool = False) -> list[str]:
        """The host pip's options beside ``pip_env``: only the trusted hosts (no URL, no secret)."""
        if flash_attn and self.flash_attn_index_url:
            return []
        return self._trusted_argv()

    def for_hash(self) -> dict[str, object]:
        """What the plan's hash sees: the URLs with passwords hidden, and whether it is proxied."""
        return {
            "index": redact_url(self.index_url) if self.index_url else None,
            "extra": [redact_url(u) for u in self.extra_index_urls],
            "trusted": list(self.trusted_hosts),
            "flash_attn": redact_url(self.flash_attn_index_url)
            if self.flash_attn_index_url
            else None,
            "via": "build-proxy-1",
        }

    def notes(self) -> list[str]:
        """What ``env build`` and the plan say about proxied indexes (empty when none is)."""
        if not self.needs_proxy:
            return []
        return [
            _(
                "pip index {url}: the build reaches it through trainwiz's build-time proxy on "
                "127.0.0.1, which adds the credentials on this machine; they are not in the "
                "Dockerfile or the image"
            ).format(url=redact_url(url))
            for url in self.urls()
        ]
