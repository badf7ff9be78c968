"""Hub failures as messages that name the preset field and the fix."""

from __future__ import annotations

from typing import Any

from backend.errors import BadInput, TrainwizError

MIRROR_HINT = "users in China can set model.endpoint (or --endpoint) to https://hf-mirror.com"


def explain_api_error(
    exc: Exception, repo: str, revision: str, endpoint: str, token_env: str
) -> TrainwizError:
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403) or isinstance(exc, GatedRepoError):
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
    return TrainwizError(f"the Hub at {endpoint} answered: {str(exc).splitlines()[0]}")


def explain_worker_error(
    error: dict[str, Any] | None,
    repo: str,
    endpoint: str,
    token_env: str,
    partial_bytes: int,
    stderr_tail: list[str],
) -> TrainwizError:
    """The download process's error event as a message naming the file and the fix."""
    if error is None:
        tail = "".join(stderr_tail).strip().splitlines()[-1:] or ["no output"]
        return TrainwizError(f"the download process failed: {tail[0]}")
    kind, name = error.get("kind"), error.get("file")
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
