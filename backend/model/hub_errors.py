"""Hub failures as messages that name the preset field and the fix."""

from __future__ import annotations

from typing import Any

from backend.errors import BadInput, TrainwizError
from backend.i18n import _
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
                _(
                    "model.endpoint: {endpoint} refused access to {repo} (HTTP {status}); {withheld} "
                    "(the token is read from {token_env})"
                ).format(
                    endpoint=endpoint,
                    repo=repo,
                    status=status,
                    withheld=withheld,
                    token_env=token_env,
                )
            )
        return BadInput(
            _(
                "model.token_env: {endpoint} refused access to {repo} (HTTP {status}): put a "
                "token with access in the environment variable {token_env} or run 'hf auth login'"
            ).format(endpoint=endpoint, repo=repo, status=status, token_env=token_env)
        )
    if isinstance(exc, RevisionNotFoundError):
        return BadInput(
            _("model.revision: {repo} has no revision '{revision}' at {endpoint}").format(
                repo=repo, revision=revision, endpoint=endpoint
            )
        )
    if isinstance(exc, RepositoryNotFoundError):
        return BadInput(
            _(
                "model.repo: no repository '{repo}' at {endpoint} (check the name; a private or "
                "gated repo also needs a token in {token_env})"
            ).format(repo=repo, endpoint=endpoint, token_env=token_env)
        )
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return TrainwizError(
            _("cannot reach {endpoint} ({name}); {MIRROR_HINT}").format(
                endpoint=endpoint, name=exc.__class__.__name__, MIRROR_HINT=MIRROR_HINT
            )
        )
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
            _(
                "model.endpoint: {endpoint} refused {name} of {repo} (HTTP {get}); {withheld} "
                "(the token is read from {token_env})"
            ).format(
                endpoint=endpoint,
                name=name,
                repo=repo,
                get=error.get("status"),
                withheld=withheld,
                token_env=token_env,
            )
        )
    if kind == "auth":
        return BadInput(
            _(
                "model.token_env: {endpoint} refused {name} of {repo} (HTTP {get}): put a token "
                "with access in ${token_env} or run 'hf auth login'"
            ).format(
                endpoint=endpoint,
                name=name,
                repo=repo,
                get=error.get("status"),
                token_env=token_env,
            )
        )
    if kind in ("repo_not_found", "revision_not_found", "entry_not_found"):
        return TrainwizError(
            _("{repo}: {name} is not on {endpoint} ({message})").format(
                repo=repo, name=name, endpoint=endpoint, message=error["message"]
            )
        )
    if kind == "transient":
        return TrainwizError(
            _(
                "{name}: the connection kept breaking ({attempts} attempts; last: {message}); "
                "{partial_bytes} bytes are kept, run fetch again to resume; {MIRROR_HINT}"
            ).format(
                name=name,
                attempts=error["attempts"],
                message=error["message"],
                partial_bytes=partial_bytes,
                MIRROR_HINT=MIRROR_HINT,
            )
        )
    return TrainwizError(
        _("{name}: download failed: {get}").format(name=name, get=error.get("message"))
    )
