"""The grammar of preset values that reach argv, Dockerfiles, plans and logs.

Quoting keeps a value from being *parsed* as shell or Dockerfile syntax; these checks keep a
value from being *read as something else* by the program it is handed to: an image reference
that is really a second Dockerfile line, a "package" ``-o APT::Update::Pre-Invoke=...`` that apt
takes as an option, a git URL ``--upload-pack=...``, an env key ``A=1 B``. Each check raises
ValueError with the fix, which pydantic turns into a ``file:line:col field: message`` error.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from backend.i18n import _

MAX_TEXT = 8192  # longer than any path (4096) or URL a preset needs

_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL", "\x1b": "ESC"}


# Every character _bad_char refuses, as one class: a C-speed search finds the first, so a long
# clean value costs one scan (a plan of a hostile preset checks ~90,000 strings). Zl and Zp are
# U+2028 and U+2029 alone; tab is always allowed, newline only in multi-line text.
_BAD_ONE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_BAD_MULTILINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _bad_char(text: str, multiline: bool) -> tuple[int, str] | None:
    first = (_BAD_MULTILINE if multiline else _BAD_ONE_LINE).search(text)
    if first is None:
        return None
    return _describe(text, first.start(), multiline)


def _describe(text: str, start: int, multiline: bool) -> tuple[int, str] | None:
    """The first refused character from ``start`` on, named (the one definition of the rule)."""
    for index in range(start, len(text)):
        char = text[index]
        code = ord(char)
        if char == "\t" or (multiline and char == "\n"):
            continue
        if 0xD800 <= code <= 0xDFFF:
            return index, f"a lone surrogate U+{code:04X} (not valid UTF-8)"
        if code < 0x20 or 0x7F <= code <= 0x9F or unicodedata.category(char) in ("Zl", "Zp"):
            return index, _CONTROL_NAMES.get(char, f"control character U+{code:04X}")
    return None


def check_plain_text(value: Any, multiline: bool = False) -> Any:
    """Every string in ``value`` (also inside lists and dict keys/values) is printable text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            bad = _bad_char(item, multiline)
            if bad is not None:
                index, what = bad
                raise ValueError(
                    _(
                        "contains {what} at character {value}: values are one line of printable text; "
                        "remove it"
                    ).format(what=what, value=index + 1)
                )
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return value


def check_no_option(value: str) -> str:
    if value.startswith("-"):
        raise ValueError(
            _("'{value}' starts with '-': a program would read it as an option").format(value=value)
        )
    if not value.strip():
        raise ValueError(_("is empty"))
    return value


_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_keys(env: Mapping[str, str]) -> Any:
    for key in env:
        if not _ENV_KEY.fullmatch(key) or len(key) > 255:
            raise ValueError(
                _(
                    "'{key}' is not an environment variable name: letters, digits and _ only, not "
                    "starting with a digit"
                ).format(key=key)
            )
    return env


# docker/distribution's reference grammar (reference/regexp.go), without IPv6 hosts.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(rf"{_NAME}(?::{_TAG})?(?:@{_DIGEST})?")


def check_image_ref(value: str) -> str:
    """An image reference as docker parses it (``registry:port/path:tag@sha256:...``)."""
    if len(value) > 255 or not IMAGE_REF.fullmatch(value):
        raise ValueError(
            _(
                "'{value}' is not an image reference like "
                "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel or "
                "registry.example.com:5000/team/image:tag (lowercase name, no spaces)"
            ).format(value=value)
        )
    return value


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_repo_id(value: str) -> str:
    """A Hub repo id ``owner/name`` (or ``name``): no path tricks, nothing a CLI reads as flags."""
    if len(value) > 200 or not _REPO_ID.fullmatch(value) or ".." in value:
        raise ValueError(
            _("'{value}' is not a Hugging Face repo id like lmsys/vicuna-7b-v1.5").format(
                value=value
            )
        )
    return value


_URL = re.compile(r"(https?|file|ssh|git)://[^\s]+|[\w.-]+@[\w.-]+:[^\s]+|/[^\s]*")


def check_url(value: str, git: bool = False) -> str:
    """A URL (http, https, file, or for git also ssh and user@host:path) or an absolute path."""
    check_no_option(value)
    if not _URL.fullmatch(value) or (not git and value.startswith(("ssh://", "git://"))):
        kinds = "https://, ssh:// or user@host:path" if git else "https:// (or http://)"
        raise ValueError(
            _("'{value}' is not a URL: give a {kinds} URL").format(value=value, kinds=kinds)
        )
    return value


_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?")


def check_host(value: str) -> str:
    """A host name or ``host:port`` (pip's --trusted-host)."""
    if len(value) > 255 or not _HOST.fullmatch(value):
        raise ValueError(
            _("'{value}' is not a host name such as pypi.tuna.tsinghua.edu.cn").format(value=value)
        )
    return value


_APT = re.compile(r"[a-z0-9][a-z0-9+.\-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:\-]+)?")


def check_apt_package(value: str) -> str:
    """A Debian package name (optionally ``:arch`` and ``=version``), never an apt option."""
    if not _APT.fullmatch(value):
        raise ValueError(
            _("'{value}' is not a Debian package name such as git or libaio-dev").format(
                value=value
            )
        )
    return value


_REQUIREMENT = re.compile(r"[A-Za-z0-9][^\s\x00-\x1f\x7f]*")


def check_pip_requirement(value: str) -> str:
    """A pip requirement (``name``, ``name==1.2``, ``git+https://...``), never a pip option."""
    if not _REQUIREMENT.fullmatch(value):
        raise ValueError(
            _(
                "'{value}' is not a pip requirement (no spaces, must not start with '-'): e.g. "
                "einops or deepspeed==0.14.4"
            ).format(value=value)
        )
    return value
