#!/usr/bin/env python
"""FastChat's OpenAI-compatible API server, started by ``trainwiz serve``.

The same app as ``python -m fastchat.serve.openai_api_server``, run with the training side's
python (it imports only the standard library, fastchat and uvicorn), with one difference: the
API key comes from ``TRAINWIZ_SERVE_API_KEY`` in the environment, which is removed before the
server starts, instead of ``--api-keys KEY`` on the command line, where every user's ``ps``
would show it.
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(prog="trainwiz-serve-api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--controller-address", required=True)
    args = parser.parse_args()
    import uvicorn
    from fastchat.serve import openai_api_server as api

    key = os.environ.pop("TRAINWIZ_SERVE_API_KEY", "")
    api.app_settings.controller_address = args.controller_address
    api.app_settings.api_keys = [key] if key else None
    # No CORS middleware (FastChat's script allows every origin): a web page the user opens
    # must not be able to drive a local model server.
    uvicorn.run(api.app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
