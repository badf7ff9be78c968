"""Hub failures as messages that name the preset field and the fix."""

from __future__ import annotations

from typing import Any

from backend.errors import BadInput, TrainwizError
from backend.redact import redact_text, redact_url

MIRROR_HINT = "users in China can set model.endpoint (or --endpoint) to https://hf-mirror.com"


def explain_api_error(
    exc: Exception,
    repo: str,
    revision: str,
    endpoint: str,
    token_env: str,
    withheld: str = "",
) -> TrainwizError:
    """``withheld``: why no token was sent (``backend.tokens``), "" when it was."""
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    endpoint = redact_url(endpoint)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403) or isinstance(exc, GatedRepoError):
        if withheld:
            return BadInput(
                f"model.endpoint: {endpoint} refused access to {repo} (HTTP {status}); "
                f"{withheld} (the token is read from {token_env})"
            )
        return BadInput(
            f"model.token_env: {endpoint} refused access to {repo} (HTTP {status}): put a token "
            f"with access in the environment variable {token_env} or run 'hf auth login'"
        )
    if isinstance(exc, RevisionNotFoundError):
        return BadInput(f"model.revision: {repo} has no revision '{revision}' at {endpoint}")
    if isinstance(exc, RepositoryNotFoundError):
        return BadInput(
            f"model.repo: no repository '{repo}' at {endpoint} (check the name; a private or "
            f"gated repo also needs a token in {token_env})"
        )
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return TrainwizError(f"cannot reach {endpoint} ({exc.__class__.__name__}); {MIRROR_HINT}")
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return TrainwizError(redact_text(f"the Hub at {endpoint} answered: {first}"))


def explain_worker_error(
    error: dict[str, Any] | None,
    repo: str,
    endpoint: str,
    token_env: str,
    partial_bytes: int,
    stderr_tail: list[str],
    withheld: str = "",
) -> TrainwizError:
    """The download process's error event as a message naming the file and the fix."""
    endpoint = redact_url(endpoint)
    if error is None:
        tail = "".join(stderr_tail).strip().splitlines()[-1:] or ["no output"]
        return TrainwizError(redact_text(f"the download process failed: {tail[0]}"))
    kind, name = error.get("kind"), error.get("file")
    error = {**error, "message": redact_text(str(error.get("message")))}
    if kind == "auth" and withheld:
        return BadInput(
            f"model.endpoint: {endpoint} refused {name} of {repo} "
            f"(HTTP {error.get('status')}); {withheld} (the token is read from {token_env})"
        )
    if kind == "auth":
        return BadInput(
            f"model.token_env: {endpoint} refused {name} of {repo} "
            f"(HTTP {error.get('status')}): put a token with access in ${token_env} "
            "or run 'hf auth login'"
        )
    if kind in ("repo_not_found", "revision_not_found", "entry_not_found"):
        return TrainwizError(f"{repo}: {name} is not on {endpoint} ({error['message']})")
    if kind == "transient":
        return TrainwizError(
            f"{name}: the connection kept breaking ({error['attempts']} attempts; last: "
            f"{error['message']}); {partial_bytes} bytes are kept, run fetch again to resume; {MIRROR_HINT}"
        )
    return TrainwizError(f"{name}: download failed: {error.get('message')}")
