"""One redaction helper for every place trainwiz writes or prints what a preset holds.

Secrets reach a preset in three ways: environment values (``launch.env``, ``container.env``,
e.g. WANDB_API_KEY), credentials inside URLs (``model.git_url``, ``pip_index_url`` with a
user:password, a ``git+https://TOKEN@`` requirement) and tokens the process holds in its own
environment (HF_TOKEN). Plans, saved run presets, train.log lines and error messages all go
through these functions, so there is one rule for what counts as secret:

- an environment value is hidden unless its key is a well-known non-secret setting (NCCL_*,
  CUDA_*, OMP_NUM_THREADS, ...) — default deny, so an unknown key never leaks; a key that names a
  secret (TOKEN, KEY, SECRET, PASS...) is hidden even under a known prefix;
- the user-info part of any ``scheme://user:pass@host`` URL is hidden, and so is the value of
  a query parameter named like a secret (``?token=``, ``access_token``, ``api_key``, ``sig``...);
- the values of secret-looking variables of this process's environment, Bearer tokens and
  ``hf_...`` tokens are hidden wherever they appear in free text.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"

_SECRET_WORDS = re.compile(
    r"TOKEN|SECRET|PASS|PWD|KEY|AUTH|CRED|COOKIE|SESSION|PRIVATE|CERT", re.IGNORECASE
)
# Settings that tune the training and say nothing about anyone: shown so logs stay diagnosable.
_SAFE_PREFIXES = (
    "NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "TORCHINDUCTOR_", "OMP_", "MKL_", "NVIDIA_",
    "TOKENIZERS_", "TRANSFORMERS_", "HF_HUB_", "HF_DATASETS_", "ACCELERATE_", "DS_", "PYTHON",
    "TRAINWIZ_", "MASTER_", "LC_", "GLOO_", "TF_", "XLA_", "WANDB_",
)  # fmt: skip
_SAFE_KEYS = {
    "MAX_JOBS", "LOGLEVEL", "TZ", "LANG", "HF_HOME", "HF_ENDPOINT", "WORLD_SIZE", "RANK",
    "LOCAL_RANK", "HOME", "PATH", "UCX_TLS", "FI_PROVIDER", "NVTE_FLASH_ATTN",
}  # fmt: skip
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s'\"]+)@")
# A query (or fragment) parameter: ``?name=value`` / ``&name=value``; the value stops at the
# next separator, a space or a quote, and never starts with '<' (so <redacted> stays as it is).
_QUERY_PARAM = re.compile(
    r"(?P<lead>[?&;#])(?P<name>[A-Za-z0-9_.~-]{1,64})=(?P<value>[^&#;\s'\"<>][^&#;\s'\"]*)"
)
# Parameter names that hold a secret: any name containing one of these words, or made of
# these words (``key``, ``sig``, ``X-Amz-Signature``; ``monkey`` and ``keyboard`` are not).
_SECRET_PARAM_ANYWHERE = re.compile(r"(?i)token|secret|passw|apikey|api_key|signature|credential")
_SECRET_PARAM_WORDS = frozenset({"key", "sig", "pass", "pwd", "auth", "authorization"})
_BEARER = re.compile(r"(?i)\b(bearer|authorization:)(\s+)([A-Za-z0-9._~+/=-]{8,})")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
MIN_SCRUB = 6  # shorter values ("1", "yes") are only hidden structurally, never in free text


def secret_env_key(key: str) -> bool:
    """Is the value of environment variable ``key`` to be hidden? (default: yes)"""
    upper = key.upper()
    if _SECRET_WORDS.search(upper):
        return True
    return not (upper in _SAFE_KEYS or upper.startswith(_SAFE_PREFIXES))


def secret_env_value(key: str, value: str) -> bool:
    """Is this environment entry secret: by its key, or because its value holds one of this
    process's secrets (``NCCL_DEBUG: <the value of HF_TOKEN>`` is as secret as HF_TOKEN)?"""
    if not value:
        return False
    if secret_env_key(key):
        return True
    return any(secret in value for secret in _process_secrets())


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The mapping with every secret value replaced (keys are kept: they are not secret)."""
    return {k: (REDACTED if secret_env_value(k, v) else v) for k, v in env.items()}


def split_secret_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(public, secret): what may be written into a command line or a script, and what must
    reach the program another way (a 0600 file, a pipe, the parent's environment)."""
    public = {k: v for k, v in env.items() if not secret_env_value(k, v)}
    return public, {k: v for k, v in env.items() if k not in public}


def redact_url(url: str) -> str:
    """``https://alice:pw@host/x`` -> ``https://alice:<redacted>@host/x``; a bare user is hidden."""

    def hide(match: re.Match[str]) -> str:
        info = match.group("info")
        user, sep, _password = info.partition(":")
        return match.group("scheme") + (f"{user}:{REDACTED}" if sep else REDACTED) + "@"

    return _QUERY_PARAM.sub(_hide_param, _URL_USERINFO.sub(hide, url))


def secret_param(name: str) -> bool:
    """Does a URL query parameter called ``name`` carry a secret?"""
    if _SECRET_PARAM_ANYWHERE.search(name):
        return True
    return any(word in _SECRET_PARAM_WORDS for word in re.split(r"[_.~-]+", name.lower()))


def _hide_param(match: re.Match[str]) -> str:
    if not secret_param(match.group("name")):
        return match.group()
    return f"{match.group('lead')}{match.group('name')}={REDACTED}"


def secret_query_names(url: str) -> list[str]:
    """The names of ``url``'s query and fragment parameters that carry a secret."""
    return [m.group("name") for m in _QUERY_PARAM.finditer(url) if secret_param(m.group("name"))]


# Names that match _SECRET_WORDS but hold no secret: the shell's working directories, and the
# session/agent plumbing of desktops and SSH (paths and ids, shown in plans and logs as they are).
_NOT_SECRET = frozenset(
    {
        "PWD",
        "OLDPWD",
        "SSH_AUTH_SOCK",
        "XDG_SESSION_ID",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_CLASS",
        "XDG_SESSION_DESKTOP",
        "DBUS_SESSION_BUS_ADDRESS",
        "SESSION_MANAGER",
    }
)


# The process environment's secrets, with the environment they were read from: redaction runs
# on every line shown (a plan of a hostile preset redacts ~200,000 strings), and decoding and
# matching every variable each time cost more than the redaction itself.
_env_secrets: tuple[dict[Any, Any], list[str]] | None = None


def _process_secrets() -> list[str]:
    global _env_secrets
    raw = getattr(os.environ, "_data", None)  # CPython's own dict behind os.environ (C-speed)
    snapshot = dict(raw) if isinstance(raw, dict) else dict(os.environ)
    if _env_secrets is not None and _env_secrets[0] == snapshot:
        return _env_secrets[1]
    found = [
        value
        for key, value in os.environ.items()
        if len(value) >= MIN_SCRUB
        and _SECRET_WORDS.search(key)
        and key.upper() not in _NOT_SECRET
        and not key.startswith("TRAINWIZ_")
    ]
    _env_secrets = (snapshot, found)
    return found


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (a log line, an error, a command) with every known secret hidden."""
    for value in sorted({*secrets, *_process_secrets()}, key=len, reverse=True):
        if len(value) >= MIN_SCRUB and value in text:
            text = text.replace(value, REDACTED)
    text = redact_url(text)
    text = _HF_TOKEN.sub(REDACTED, text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """An argv for display: URL credentials hidden, ``-e KEY=VALUE`` values per the env rule."""
    out: list[str] = []
    previous = ""
    for arg in argv:
        if previous in ("-e", "--env") and "=" in arg:
            key, _, value = arg.partition("=")
            arg = f"{key}={redact_env({key: value})[key]}"
        out.append(redact_text(arg))
        previous = arg
    return out


def _walk(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        if key == "env":
            return redact_env({str(k): str(v) for k, v in value.items()})
        return {k: _walk(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, key) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def redact_data(data: Any) -> Any:
    """A JSON-like structure (a dumped preset or plan) with env values and URL credentials hidden."""
    return _walk(data)


def preset_secrets(preset: Any) -> list[str]:
    """Every secret value a preset holds, for scrubbing free text (messages, logs)."""
    values: list[str] = []
    for env in (preset.launch.env, preset.container.env):
        values += [v for k, v in env.items() if secret_env_key(k) and len(v) >= MIN_SCRUB]
    dumped = preset.model_dump(mode="json")
    stack: list[Any] = [dumped]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            for match in _URL_USERINFO.finditer(item):
                _user, _, password = match.group("info").partition(":")
                values.append(password or match.group("info"))
            values += [
                m.group("value")
                for m in _QUERY_PARAM.finditer(item)
                if secret_param(m.group("name"))
            ]
    return [v for v in values if v]


SECRET_ENV = "secret.env.json"


def write_secret_env(run_dir: Any, values: Mapping[str, str]) -> None:
    """The secret environment values a multi-node run hands its nodes (over ssh's stdin, or
    sbatch's own environment), in a 0600 file beside the run: never in launch.json, a script
    or a command line."""
    target = Path(run_dir) / SECRET_ENV
    merged = {**read_secret_env(run_dir), **values}  # the node values and launch.json's
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(merged, handle)


def read_secret_env(run_dir: Any) -> dict[str, str]:
    try:
        data = json.loads((Path(run_dir) / SECRET_ENV).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


_ENV_KEYS = ("env", "environment")


def strip_spec_secrets(spec: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """launch.json without a secret: every ``env``/``environment`` mapping's secret values
    become ``<redacted>``; returns (the copy, ``{"where/KEY": value}``) for the 0600 file."""
    found: dict[str, str] = {}

    def walk(value: Any, where: str, key: str | None) -> Any:
        if isinstance(value, dict):
            if key in _ENV_KEYS and all(isinstance(v, str) for v in value.values()):
                out = {}
                for k, v in value.items():
                    if secret_env_value(str(k), v):
                        found[f"{where}/{k}"] = v
                        out[k] = REDACTED
                    else:
                        out[k] = v
                return out
            return {k: walk(v, f"{where}/{k}", str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}/{i}", key) for i, v in enumerate(value)]
        return value

    return walk(spec, path, None), found


def restore_spec_secrets(spec: Any, secrets: Mapping[str, str]) -> Any:
    """The inverse of :func:`strip_spec_secrets`, in the watcher's memory only."""

    def walk(value: Any, where: str, key: str | None) -> Any:
        if isinstance(value, dict):
            if key in _ENV_KEYS:
                return {
                    k: secrets.get(f"{where}/{k}", v) if v == REDACTED else v
                    for k, v in value.items()
                }
            return {k: walk(v, f"{where}/{k}", str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}/{i}", key) for i, v in enumerate(value)]
        return value

    return walk(spec, "", None)
