"""Download the listed files of a Hub repo into a directory (run as a subprocess by hub.py).

A separate process so that the wizard can cancel a multi-GB file at once (terminate) and resume
later from huggingface_hub's ``.incomplete`` file. Job JSON on stdin: {repo, commit, endpoint,
dir, files, retries, no_token}. The token comes only through the HF_TOKEN environment variable,
and only when the parent decided the endpoint may have it (``backend.tokens``). Events go to
stdout, one JSON object per line: file_start, file_done, retry, error.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def classify(exc: BaseException) -> tuple[str, Any]:
    """(kind, http status) of an exception; 'transient' ones are retried with resume."""
    import requests
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status in (401, 403) or isinstance(exc, GatedRepoError):
        return "auth", status
    if isinstance(exc, EntryNotFoundError):
        return "entry_not_found", status
    if isinstance(exc, RevisionNotFoundError):
        return "revision_not_found", status
    if isinstance(exc, RepositoryNotFoundError):
        return "repo_not_found", status
    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return "transient", status
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "transient", status
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return "transient", status
    if status is not None and status >= 500:
        return "transient", status
    return "other", status


def main() -> None:
    job = json.load(sys.stdin)
    from huggingface_hub import hf_hub_download

    for name in job["files"]:
        emit(event="file_start", file=name)
        attempt = 0
        while True:
            try:
                hf_hub_download(
                    job["repo"],
                    name,
                    revision=job["commit"],
                    local_dir=job["dir"],
                    endpoint=job["endpoint"],
                    # False: no token at all, not even HF_TOKEN or the cached login.
                    token=False if job.get("no_token") else None,
                )
                break
            except Exception as exc:
                kind, status = classify(exc)
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                if kind == "transient" and attempt < job["retries"]:
                    attempt += 1
                    emit(event="retry", file=name, attempt=attempt, message=message)
                    time.sleep(min(0.2 * 2**attempt, 10))
                    continue
                emit(
                    event="error",
                    file=name,
                    kind=kind,
                    status=status,
                    message=message,
                    attempts=attempt + 1,
                )
                sys.exit(3)
        emit(event="file_done", file=name)


if __name__ == "__main__":
    main()
