"""OpenAI and OpenAI-compatible servers over plain httpx (`/v1/chat/completions`).

Structured output is `response_format: {"type": "json_schema", ...}`, with `strict`
on when the schema is closed (OpenAI then guarantees it). Many compatible servers
(vLLM, llama.cpp, LM Studio, gateways) accept that too; one that answers 400 about
`response_format` is asked again, for the rest of this provider's life, with
`{"type": "json_object"}` and the schema spelled out in the system message.
Refusals (`message.refusal`, `finish_reason == "content_filter"`) surface as such.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from typing import Any

import httpx

from memoryd.errors import ExtractionFailed
from memoryd.llm.base import (
    ProviderBase,
    RawCompletion,
    error_message,
    json_body,
    raise_for_status,
    send_json,
)
from memoryd.llm.schema import schema_instructions, schema_is_closed

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
_VERSION_SEGMENT = re.compile(r"v\d+[a-z0-9]*")


def chat_completions_url(base_url: str) -> str:
    """The chat-completions endpoint under `base_url`, as users write it.

    `https://api.openai.com/v1`, `http://localhost:8000` and
    `https://host/v1beta/openai` all work; a full endpoint URL is kept as is.
    """
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    path = httpx.URL(url).path.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    if _VERSION_SEGMENT.fullmatch(last) or last == "openai":
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


class OpenAICompatProvider(ProviderBase):
    """Chat Completions with JSON-schema response format."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        base_url: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            model=model, timeout_s=timeout_s, max_retries=max_retries, sleep=sleep, rng=rng
        )
        self.base_url = base_url or OPENAI_BASE_URL
        self._url = chat_completions_url(self.base_url)
        # OpenAI's reasoning models reject `max_tokens`; many compatible servers only
        # know `max_tokens`.
        self._limit_field = (
            "max_completion_tokens"
            if httpx.URL(self._url).host == "api.openai.com"
            else "max_tokens"
        )
        self._json_schema_supported = True
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            transport=transport, timeout=httpx.Timeout(timeout_s), headers=headers
        )

    def close(self) -> None:
        self._client.close()

    def _raw_complete(
        self,
        *,
        system: str,
        prompt: str,
        schema_name: str,
        json_schema: dict[str, Any],
        max_tokens: int,
    ) -> RawCompletion:
        body = self._body(system, prompt, schema_name, json_schema, max_tokens)
        response = send_json(self._client, self._url, body)
        if (
            response.status_code == 400
            and self._json_schema_supported
            and _rejects_json_schema(response)
        ):
            logger.info(
                "%s at %s does not take a json_schema response_format; using json_object",
                self.name,
                self.base_url,
            )
            self._json_schema_supported = False
            body = self._body(system, prompt, schema_name, json_schema, max_tokens)
            response = send_json(self._client, self._url, body)
        raise_for_status(response)
        return self._parse(json_body(response, self.name))

    def _body(
        self,
        system: str,
        prompt: str,
        schema_name: str,
        json_schema: dict[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        response_format: dict[str, Any]
        if self._json_schema_supported:
            response_format = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name,
                    "schema": json_schema,
                    "strict": schema_is_closed(json_schema),
                },
            }
        else:
            system = f"{system}\n\n{schema_instructions(json_schema)}"
            response_format = {"type": "json_object"}
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
            "response_format": response_format,
            self._limit_field: max_tokens,
        }

    def _parse(self, data: dict[str, Any]) -> RawCompletion:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ExtractionFailed(f"{self.name} reply at {self._url} has no choices")
        choice: dict[str, Any] = choices[0]
        message = choice.get("message") or {}
        finish = choice.get("finish_reason")
        refusal = message.get("refusal") or None
        if refusal is None and finish == "content_filter":
            refusal = "the provider's content filter stopped the reply"
        content = message.get("content") or ""
        if isinstance(content, list):  # some servers return content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        usage = data.get("usage") or {}
        return RawCompletion(
            text=str(content),
            model=str(data.get("model") or self.model),
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            refusal=None if refusal is None else str(refusal),
            truncated=finish == "length",
        )


def _rejects_json_schema(response: httpx.Response) -> bool:
    message = error_message(response).lower()
    return "response_format" in message or "json_schema" in message
