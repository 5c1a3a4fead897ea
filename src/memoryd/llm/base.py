"""The provider seam: one template method every LLM backend shares.

`ProviderBase.complete_json` owns everything that must behave the same whatever the
backend: retries with exponential backoff and jitter on 429/5xx/timeouts (honouring
`retry-after`), JSON extraction and pydantic validation with one corrective retry,
refusal and error mapping onto memoryd's error tree, and token/cost accounting.
A subclass implements only `_raw_complete`, translating one request into its API and
its reply (or failure) back into `RawCompletion`, `ProviderHTTPError` or
`ProviderUnreachable`. No SDK is imported here; the plain-`httpx` helpers at the end
serve the providers that speak HTTP themselves.

Nothing in this module logs prompt or reply text: a prompt may hold a sensitive
memory, and no plaintext of one may reach a log file (DESIGN §7).
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from memoryd.errors import ConfigError, ExtractionFailed, RateLimited
from memoryd.llm.pricing import Price, price_for
from memoryd.llm.schema import portable_schema, schema_identifier

if TYPE_CHECKING:  # httpx loads with a provider that speaks HTTP (`send_json`)
    import httpx

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

KEYRING_SERVICE = "memoryd"
GENERIC_KEY_ENV = "MEMORYD_LLM_API_KEY"
PROVIDER_KEY_ENV: Mapping[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
}


def keyring_username(provider: str) -> str:
    """The keyring entry of a provider's API key: service `memoryd`, user `<provider>-api-key`."""
    return f"{provider}-api-key"


def api_key_hint(provider: str) -> str:
    """Exactly what to run to give memoryd a key for `provider`."""
    env = PROVIDER_KEY_ENV.get(provider, GENERIC_KEY_ENV)
    also = f" (or {GENERIC_KEY_ENV})" if env != GENERIC_KEY_ENV else ""
    return (
        f"set {env}{also} in the environment, or store the key in the OS keyring with "
        f"`keyring set {KEYRING_SERVICE} {keyring_username(provider)}`"
    )


class Usage(BaseModel):
    """What a provider has spent so far: billed requests, tokens and estimated USD.

    `cost_usd` starts at 0 and becomes None for good as soon as one reply came from a
    model without a known price (see PRICES), because a partial sum would understate
    the bill.
    """

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0

    def plus(self, input_tokens: int, output_tokens: int, price: Price | None) -> Usage:
        cost = (
            None
            if self.cost_usd is None or price is None
            else self.cost_usd + price.cost(input_tokens, output_tokens)
        )
        return Usage(
            requests=self.requests + 1,
            input_tokens=self.input_tokens + input_tokens,
            output_tokens=self.output_tokens + output_tokens,
            cost_usd=cost,
        )


# --------------------------------------------------------------------------- the seam


@dataclass(frozen=True)
class RawCompletion:
    """One reply, as a subclass hands it back before any validation."""

    text: str
    """The JSON the model produced (tool input serialised, or message text)."""
    model: str
    """The model that answered, as the API reports it (may be a dated snapshot)."""
    input_tokens: int = 0
    output_tokens: int = 0
    refusal: str | None = None
    """Set when the model or the provider's filter declined to answer."""
    truncated: bool = False
    """The reply stopped at the token limit, so its JSON may be cut off."""


class ProviderHTTPError(Exception):
    """The API answered with a non-2xx status; raised by `_raw_complete`, never escapes."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class ProviderUnreachable(Exception):
    """Nothing came back (timeout, refused connection); raised by `_raw_complete`."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class LLMProvider(Protocol):
    """What callers of an LLM need: a validated JSON answer and the bill.

    Example::

        judgement = provider.complete_json(
            system="You judge …", prompt="…", schema=SupersedeJudgement
        )
    """

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def complete_json(
        self, *, system: str, prompt: str, schema: type[T], max_tokens: int = 1024
    ) -> T: ...

    def usage(self) -> Usage: ...


RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
"""Besides every 5xx (Anthropic's 529 "overloaded" included)."""

MAX_CORRECTIVE_TOKENS = 8192


class ProviderBase(ABC):
    """Template method: `complete_json` is shared, `_raw_complete` is per backend.

    `sleep` and `rng` are injectable so tests can assert the waits without waiting.
    """

    name: ClassVar[str]
    unreachable_hint: ClassVar[str] = "check the network connection and llm.base_url"

    def __init__(
        self,
        *,
        model: str,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        max_retry_after_s: float = 60.0,
    ) -> None:
        self._model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._sleep = sleep or time.sleep
        self._rng = rng or random.Random()
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_retry_after_s = max_retry_after_s
        self._lock = threading.Lock()
        self._usage = Usage()

    @property
    def model(self) -> str:
        return self._model

    # -- public ---------------------------------------------------------------------

    def complete_json(
        self, *, system: str, prompt: str, schema: type[T], max_tokens: int = 1024
    ) -> T:
        """Ask for one JSON object matching `schema` and return it validated.

        Transient failures are retried (`max_retries`); an answer that is not valid
        JSON for `schema` gets one corrective retry, then `ExtractionFailed`.
        Raises `RateLimited` when 429s outlast the retries, `ConfigError` for a bad
        key or unknown model, `ExtractionFailed` for refusals and everything else.
        """
        json_schema = portable_schema(schema)
        schema_name = schema_identifier(schema.__name__)
        raw = self._complete_with_retries(system, prompt, schema_name, json_schema, max_tokens)
        try:
            return self._validate(raw, schema)
        except _InvalidReply as first:
            logger.info(
                "%s %s: reply did not match %s (%s); asking once more",
                self.name,
                self.model,
                schema.__name__,
                first.summary,
            )
            retry_tokens = (
                max(max_tokens, min(max_tokens * 2, MAX_CORRECTIVE_TOKENS))
                if raw.truncated
                else max_tokens
            )
            corrective = f"{prompt}\n\n{_correction(first, truncated=raw.truncated)}"
            raw = self._complete_with_retries(
                system, corrective, schema_name, json_schema, retry_tokens
            )
            try:
                return self._validate(raw, schema)
            except _InvalidReply as second:
                raise ExtractionFailed(
                    f"{self.name} model {self.model} returned no valid {schema.__name__} "
                    f"in two attempts: {second.summary}",
                    hint="the model may be too small for structured output; try a larger "
                    "llm.model, or retry later",
                ) from None

    def usage(self) -> Usage:
        """Requests, tokens and estimated cost since this provider was built."""
        with self._lock:
            return self._usage

    @abstractmethod
    def close(self) -> None:
        """Release the HTTP client."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- for subclasses ---------------------------------------------------------------

    @abstractmethod
    def _raw_complete(
        self,
        *,
        system: str,
        prompt: str,
        schema_name: str,
        json_schema: dict[str, Any],
        max_tokens: int,
    ) -> RawCompletion:
        """Send one request; translate failures into ProviderHTTPError/ProviderUnreachable."""

    def _price(self, model: str) -> Price | None:
        return price_for(model)

    def _status_hint(self, status: int) -> str:
        """What the user can do about a 401/403/404 from this provider."""
        if status in (401, 403):
            return f"check the API key: {api_key_hint(self.name)}"
        return f"check llm.model ({self.model!r}) and llm.base_url in the memoryd config"

    # -- internals --------------------------------------------------------------------

    def _complete_with_retries(
        self,
        system: str,
        prompt: str,
        schema_name: str,
        json_schema: dict[str, Any],
        max_tokens: int,
    ) -> RawCompletion:
        failures = 0
        while True:
            try:
                raw = self._raw_complete(
                    system=system,
                    prompt=prompt,
                    schema_name=schema_name,
                    json_schema=json_schema,
                    max_tokens=max_tokens,
                )
            except ProviderHTTPError as exc:
                wait = self._wait_after_status(exc, failures)
            except ProviderUnreachable as exc:
                wait = self._wait_after_unreachable(exc, failures)
            else:
                self._record(raw)
                return raw
            failures += 1
            self._sleep(wait)

    def _wait_after_status(self, exc: ProviderHTTPError, failures: int) -> float:
        """The wait before the next attempt, or the error that ends the call."""
        status = exc.status
        if status in (401, 403, 404):
            what = (
                "rejected the API key"
                if status in (401, 403)
                else f"does not know model {self.model!r}, or llm.base_url is wrong"
            )
            raise ConfigError(
                f"{self.name} {what} (HTTP {status}: {exc.message})",
                hint=self._status_hint(status),
            )
        if status not in RETRYABLE_STATUSES and not 500 <= status <= 599:
            raise ExtractionFailed(
                f"{self.name} model {self.model} rejected the request (HTTP {status}: "
                f"{exc.message})"
            )
        error = RateLimited if status == 429 else ExtractionFailed
        if failures >= self.max_retries:
            raise error(
                f"{self.name} model {self.model} still failing after {failures + 1} attempts "
                f"(HTTP {status}: {exc.message})",
                hint=_RATE_LIMIT_HINT
                if status == 429
                else "the provider is having trouble; the work is retried later",
            )
        if exc.retry_after is not None and exc.retry_after > self.max_retry_after_s:
            raise error(
                f"{self.name} asked memoryd to wait {exc.retry_after:.0f} s (HTTP {status}), "
                f"longer than the {self.max_retry_after_s:.0f} s it waits in one call",
                hint=_RATE_LIMIT_HINT,
            )
        wait = exc.retry_after if exc.retry_after is not None else self._backoff(failures)
        logger.warning(
            "%s %s: HTTP %s, retry %d of %d in %.1f s",
            self.name,
            self.model,
            status,
            failures + 1,
            self.max_retries,
            wait,
        )
        return wait

    def _wait_after_unreachable(self, exc: ProviderUnreachable, failures: int) -> float:
        what = f"timed out after {self.timeout_s:g} s" if exc.timed_out else "unreachable"
        if failures >= self.max_retries:
            raise ExtractionFailed(
                f"{self.name} model {self.model} {what} ({failures + 1} attempts): {exc}",
                hint=self.unreachable_hint
                if not exc.timed_out
                else "raise llm.timeout_s, or check the network connection",
            )
        wait = self._backoff(failures)
        logger.warning(
            "%s %s: %s, retry %d of %d in %.1f s",
            self.name,
            self.model,
            what,
            failures + 1,
            self.max_retries,
            wait,
        )
        return wait

    def _backoff(self, failures: int) -> float:
        """Exponential backoff with "equal jitter": between half and all of the step."""
        step = min(self.backoff_max_s, self.backoff_base_s * 2.0**failures)
        return step / 2 + self._rng.uniform(0, step / 2)

    def _record(self, raw: RawCompletion) -> None:
        price = self._price(raw.model) or self._price(self.model)
        with self._lock:
            self._usage = self._usage.plus(raw.input_tokens, raw.output_tokens, price)
        logger.debug(
            "%s %s: %d input + %d output tokens",
            self.name,
            raw.model,
            raw.input_tokens,
            raw.output_tokens,
        )

    def _validate(self, raw: RawCompletion, schema: type[T]) -> T:
        if raw.refusal is not None:
            raise ExtractionFailed(
                f"{self.name} model {self.model} declined to answer: {raw.refusal}",
                hint="the text may trip the provider's safety filter; it is left to the "
                "offline extraction stage",
            )
        try:
            data = extract_json(raw.text)
        except ValueError as exc:
            raise _InvalidReply(str(exc), str(exc)) from None
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            raise _InvalidReply(_summarise(exc), _describe(exc)) from None


_RATE_LIMIT_HINT = (
    "the provider is rate-limiting memoryd; the work is retried later, or raise your API "
    "tier / lower the load"
)


class _InvalidReply(Exception):
    """A reply that is not valid JSON for the schema.

    `summary` is safe to log (no reply text); `detail` goes back to the model only.
    """

    def __init__(self, summary: str, detail: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail


def _summarise(exc: ValidationError) -> str:
    """Pydantic errors without the offending values (those may be sensitive text)."""
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or 'reply'}: {err['msg']}"
        for err in exc.errors()[:5]
    ]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _describe(exc: ValidationError) -> str:
    return "\n".join(
        f"- {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']} "
        f"(got {json.dumps(err.get('input'), ensure_ascii=False, default=str)[:200]})"
        for err in exc.errors()[:20]
    )


def _correction(invalid: _InvalidReply, *, truncated: bool) -> str:
    cut = (
        " It was cut off at the output token limit: be more concise (shorter quotes, "
        "leave out low-confidence items)."
        if truncated
        else ""
    )
    return (
        "<correction>\n"
        f"Your previous reply could not be used.{cut} Problems found:\n"
        f"{invalid.detail}\n"
        "Reply again with exactly one JSON object that follows the requested structure: "
        "every required field present, values of the stated types and allowed values, "
        "no text before or after the JSON.\n"
        "</correction>"
    )


# --------------------------------------------------------------------------- JSON


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_MAX_OBJECT_STARTS = 50


def extract_json(text: str) -> Any:
    """The JSON object in a reply that may wrap it in ```json fences or prose.

    Every schema here is an object, so a bare array or string counts as no answer.

    Raises ValueError (with a message free of the reply text) when there is none.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply was empty")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    else:
        if isinstance(whole, dict):
            return whole
        problem = f"it is a JSON {type(whole).__name__}"
    for match in _FENCE.finditer(stripped):
        try:
            fenced = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(fenced, dict):
            return fenced
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    tries = 0
    while start != -1 and tries < _MAX_OBJECT_STARTS:
        try:
            value, _ = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError:
            tries += 1
            start = stripped.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = stripped.find("{", start + 1)
    raise ValueError(f"the reply holds no JSON object ({problem})")


# --------------------------------------------------------------------------- headers


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, `retry-after` (seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


# --------------------------------------------------------------------------- plain HTTP


def send_json(client: httpx.Client, url: str, body: Mapping[str, Any]) -> httpx.Response:
    """POST `body`; a timeout or connection failure becomes ProviderUnreachable."""
    import httpx

    try:
        return client.post(url, json=body)
    except httpx.TimeoutException as exc:
        raise ProviderUnreachable(f"{type(exc).__name__}: {exc}", timed_out=True) from exc
    except httpx.TransportError as exc:
        raise ProviderUnreachable(f"{type(exc).__name__}: {exc}", timed_out=False) from exc


def raise_for_status(response: httpx.Response) -> None:
    """A 4xx/5xx becomes ProviderHTTPError with the API's own message and `retry-after`."""
    if response.status_code >= 400:
        raise ProviderHTTPError(
            response.status_code,
            error_message(response),
            retry_after=parse_retry_after(response.headers),
        )


def error_message(response: httpx.Response) -> str:
    """`error.message` (OpenAI), `error` (Ollama) or `message` (vLLM), else the body's start."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip() or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return response.text[:200].strip()


def json_body(response: httpx.Response, provider: str) -> dict[str, Any]:
    """The JSON object of a 2xx reply; anything else means a proxy or a wrong base_url."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ExtractionFailed(
            f"{provider} at {response.request.url} answered HTTP {response.status_code} "
            "with a body that is not a JSON object",
            hint="check llm.base_url: it should point at the API, not a web page",
        )
    return body
