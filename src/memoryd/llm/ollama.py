"""A local model through Ollama's native `/api/chat`, over plain httpx.

Structured output is Ollama's `format` field set to the JSON schema, which it compiles
into a decoding grammar. The model does not see that grammar, so the schema is also
spelled out in the system message, as Ollama's documentation advises. Local models
cost nothing per token, so usage is priced at zero.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx

from memoryd.llm.base import (
    GENERIC_KEY_ENV,
    ProviderBase,
    RawCompletion,
    json_body,
    raise_for_status,
    send_json,
)
from memoryd.llm.pricing import Price
from memoryd.llm.schema import schema_instructions

OLLAMA_BASE_URL = "http://127.0.0.1:11434"
_FREE = Price(0.0, 0.0)


def chat_url(base_url: str) -> str:
    """`<base>/api/chat`, also when the user pasted the `/v1` or `/api` address."""
    url = base_url.rstrip("/")
    for suffix in ("/api/chat", "/api", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    return f"{url}/api/chat"


class OllamaProvider(ProviderBase):
    """Ollama chat with a JSON-schema `format`."""

    name = "ollama"
    unreachable_hint = "start Ollama with `ollama serve`, or point llm.base_url at it"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            model=model, timeout_s=timeout_s, max_retries=max_retries, sleep=sleep, rng=rng
        )
        self.base_url = base_url or OLLAMA_BASE_URL
        self._url = chat_url(self.base_url)
        # Ollama has no keys; one only matters for an authenticating proxy in front of it.
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            transport=transport, timeout=httpx.Timeout(timeout_s), headers=headers
        )

    def close(self) -> None:
        self._client.close()

    def _price(self, model: str) -> Price | None:
        return _FREE

    def _status_hint(self, status: int) -> str:
        if status == 404:
            return (
                f"pull the model first (`ollama pull {self.model}`), or set llm.model to one "
                "that `ollama list` shows"
            )
        return f"Ollama has no keys; the proxy in front of it wants one: set {GENERIC_KEY_ENV}"

    def _raw_complete(
        self,
        *,
        system: str,
        prompt: str,
        schema_name: str,
        json_schema: dict[str, Any],
        max_tokens: int,
    ) -> RawCompletion:
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": f"{system}\n\n{schema_instructions(json_schema)}"},
                {"role": "user", "content": prompt},
            ],
            "stream": False,
            "format": json_schema,
            "options": {"temperature": 0, "num_predict": max_tokens},
        }
        response = send_json(self._client, self._url, body)
        raise_for_status(response)
        data = json_body(response, self.name)
        message = data.get("message") or {}
        return RawCompletion(
            text=str(message.get("content") or ""),
            model=str(data.get("model") or self.model),
            input_tokens=int(data.get("prompt_eval_count") or 0),
            output_tokens=int(data.get("eval_count") or 0),
            truncated=data.get("done_reason") == "length",
        )
