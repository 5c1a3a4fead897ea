"""Claude through the official `anthropic` SDK — the only module that imports it.

Structured output is forced tool use: the schema is the `input_schema` of one tool and
`tool_choice` names it, so the reply is a `tool_use` block whose `input` the API has
already parsed as JSON. That works on every Claude model, where `output_config.format`
(constrained JSON outputs) is limited to recent ones; the base class validates the
input against the pydantic schema either way. The SDK's own retries are off
(`max_retries=0`) so that `ProviderBase`'s loop is the only one.

The SDK (2.x) speaks `httpx2`, not `httpx`; an injected `httpx` transport (tests'
`httpx.MockTransport`, a proxy) is adapted by `HttpxTransportBridge`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
import httpx2

from memoryd.llm.base import (
    ProviderBase,
    ProviderHTTPError,
    ProviderUnreachable,
    RawCompletion,
    parse_retry_after,
)

if TYPE_CHECKING:
    import anthropic

DEFAULT_MODEL = "claude-haiku-4-5"
_TRUNCATING_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})


class AnthropicProvider(ProviderBase):
    """Claude via the Messages API with forced tool use for structured output."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
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
        import anthropic

        http_client = (
            None
            if transport is None
            else anthropic.DefaultHttpxClient(transport=HttpxTransportBridge(transport))
        )
        self._client: anthropic.Anthropic = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client,
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
        import anthropic
        from anthropic.types import TextBlock, ToolUseBlock

        tool_name = f"record_{schema_name}"[:64]
        description = json_schema.get("description") or f"The {schema_name} answer."
        try:
            message = self._client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                tools=[
                    {
                        "name": tool_name,
                        "description": f"Record your answer. {description} Always answer "
                        "by calling this tool, never in prose.",
                        "input_schema": json_schema,
                    }
                ],
                tool_choice={
                    "type": "tool",
                    "name": tool_name,
                    "disable_parallel_tool_use": True,
                },
            )
        except anthropic.APIStatusError as exc:
            raise ProviderHTTPError(
                exc.status_code,
                exc.api_message or exc.message,
                retry_after=parse_retry_after(exc.response.headers),
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ProviderUnreachable(str(exc), timed_out=True) from exc
        except anthropic.APIConnectionError as exc:
            raise ProviderUnreachable(str(exc), timed_out=False) from exc

        usage = message.usage
        input_tokens = (
            usage.input_tokens
            + (usage.cache_creation_input_tokens or 0)
            + (usage.cache_read_input_tokens or 0)
        )
        refusal: str | None = None
        if message.stop_reason == "refusal":
            details = message.stop_details
            refusal = (details.explanation if details else None) or "stop_reason refusal"
        text = ""
        for block in message.content:
            if isinstance(block, ToolUseBlock) and block.name == tool_name:
                text = json.dumps(block.input, ensure_ascii=False)
                break
        else:
            # No tool call (a refusal, or a model ignoring tool_choice): whatever text it
            # wrote may still hold the JSON.
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        return RawCompletion(
            text=text,
            model=message.model,
            input_tokens=input_tokens,
            output_tokens=usage.output_tokens,
            refusal=refusal,
            truncated=message.stop_reason in _TRUNCATING_STOPS,
        )


class HttpxTransportBridge(httpx2.BaseTransport):
    """Serves the SDK's `httpx2` client from an `httpx` transport.

    Requests and responses are copied across whole (the Messages calls here never
    stream); transport errors are re-raised as the `httpx2` class of the same name so
    the SDK still tells a timeout from a refused connection.
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        outgoing = httpx.Request(
            request.method,
            str(request.url),
            headers=request.headers.multi_items(),
            content=request.read(),
            extensions=request.extensions,
        )
        try:
            response = self._inner.handle_request(outgoing)
            headers = response.headers.multi_items()
            try:
                if response.is_stream_consumed:
                    # Built in memory (a MockTransport reply): `content` is already
                    # decoded, so its content-encoding no longer applies.
                    body = response.content
                    headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
                else:
                    body = b"".join(response.iter_raw())
            finally:
                response.close()
        except httpx.TransportError as exc:
            raise _as_httpx2_error(exc, request) from exc
        return httpx2.Response(response.status_code, headers=headers, content=body, request=request)

    def close(self) -> None:
        self._inner.close()


def _as_httpx2_error(exc: httpx.TransportError, request: httpx2.Request) -> httpx2.TransportError:
    mapped = getattr(httpx2, type(exc).__name__, None)
    if isinstance(mapped, type) and issubclass(mapped, httpx2.TransportError):
        return mapped(str(exc), request=request)
    if isinstance(exc, httpx.TimeoutException):
        return httpx2.TimeoutException(str(exc), request=request)
    return httpx2.TransportError(str(exc), request=request)
