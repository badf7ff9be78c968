#!/usr/bin/env python
"""FastChat's OpenAI-compatible API server, started by ``trainwiz serve``.

The same app as ``python -m fastchat.serve.openai_api_server``, run with the training side's
python (it imports only the standard library, fastchat, uvicorn and, for a run's own template,
transformers), with two differences:

- the API key comes from ``TRAINWIZ_SERVE_API_KEY`` in the environment, which is removed before
  the server starts, instead of ``--api-keys KEY`` on the command line, where every user's
  ``ps`` would show it;
- with ``TRAINWIZ_SERVE_TOKENIZER`` (the run's tokenizer folder) and ``TRAINWIZ_SERVE_TEMPLATE``
  (the run's chat template, anything but vicuna) a chat's prompt is the one training saw:
  ``model`` has the tokenizer's own Jinja template render the messages (FastChat's worker then
  runs the ``raw`` conversation, which adds nothing); for both, a leading BOS text is dropped
  when the tokenizer adds BOS itself (FastChat's worker tokenizes the prompt with special
  tokens: training's BOS exactly once), and the template's end-of-turn token stops generation.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

TOKENIZER_ENV = "TRAINWIZ_SERVE_TOKENIZER"  # serve_template.TOKENIZER_ENV
TEMPLATE_ENV = "TRAINWIZ_SERVE_TEMPLATE"  # serve_template.TEMPLATE_ENV


class Rendering:
    """The run's template over the run's tokenizer, loaded once."""

    def __init__(self, tokenizer_dir: str, template: str) -> None:
        import transformers
        import worker  # deferred: the results worker beside this script renders chats alike

        self.tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir, use_fast=True)
        self.template = template
        masks = worker.entry_module("chat_masks")
        self.renderer = masks.renderer_for(template, self.tokenizer)
        # The BOS the worker's tokenizer adds to a prompt; a rendered one that starts with its
        # text would then have two (training's Encoder adds it only when the text has none).
        self.bos = ""
        if masks.Encoder(self.tokenizer, "").prefix:
            self.bos = str(self.tokenizer.bos_token)
        self.end_of_turn = worker.end_of_turn_id(masks, self.renderer, self.tokenizer)

    def prompt(self, messages: list[dict[str, Any]], fastchat_prompt: str) -> str:
        if self.template == "model":
            plain = [{"role": m["role"], "content": text_of(m.get("content"))} for m in messages]
            rendered = self.renderer.render(plain, True)
        else:
            rendered = fastchat_prompt  # the FastChat template the run trained with
        if self.bos and rendered.startswith(self.bos):
            rendered = rendered[len(self.bos) :]
        return rendered

    def apply(self, params: dict[str, Any], messages: Any) -> dict[str, Any]:
        if isinstance(messages, str):  # /v1/completions: the caller's prompt as it is
            return params
        params["prompt"] = self.prompt(list(messages), str(params.get("prompt", "")))
        stops = list(params.get("stop_token_ids") or [])
        if self.end_of_turn is not None and self.end_of_turn not in stops:
            stops.append(self.end_of_turn)
        params["stop_token_ids"] = stops
        return params


def text_of(content: Any) -> str:
    """A message's text: OpenAI's list of parts keeps its text parts."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def render_with_run_template(api: Any, rendering: Rendering) -> None:
    """Every chat request's gen_params through ``rendering`` (FastChat's handlers look
    ``get_gen_params`` up in the module at call time)."""
    original = api.get_gen_params

    async def get_gen_params(model_name: str, worker_addr: str, messages: Any, **kw: Any) -> Any:
        params = await original(model_name, worker_addr, messages, **kw)
        return rendering.apply(params, messages)

    api.get_gen_params = get_gen_params


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
    tokenizer, template = os.environ.get(TOKENIZER_ENV), os.environ.get(TEMPLATE_ENV)
    if tokenizer and template and template != "vicuna":
        render_with_run_template(api, Rendering(tokenizer, template))
        print(f"trainwiz: chat prompts rendered with template {template} ({tokenizer})", flush=True)
    # No CORS middleware (FastChat's script allows every origin): a web page the user opens
    # must not be able to drive a local model server.
    uvicorn.run(api.app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
