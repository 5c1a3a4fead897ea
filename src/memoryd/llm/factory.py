"""Build the configured provider: the one place that reads API keys.

Key lookup, first match wins: the `api_key` argument, `MEMORYD_LLM_API_KEY` (memoryd's
own, so it can differ from a key other tools use), the provider's usual variable
(`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`), then the OS keyring (service `memoryd`,
user `<provider>-api-key`). Ollama needs no key; an OpenAI-compatible server on
localhost does not require one either. Provider modules are imported only when chosen,
so building no provider costs nothing.
"""

from __future__ import annotations

import logging
import os
from typing import assert_never

import httpx

from memoryd.config import LLMSettings
from memoryd.errors import ConfigError, MissingExtra
from memoryd.llm.base import (
    GENERIC_KEY_ENV,
    KEYRING_SERVICE,
    PROVIDER_KEY_ENV,
    LLMProvider,
    api_key_hint,
    keyring_username,
)

logger = logging.getLogger(__name__)

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def provider_from_settings(
    settings: LLMSettings,
    *,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> LLMProvider | None:
    """The provider `settings` describe, or None when `provider = "none"`.

    `transport` replaces the network (tests pass an `httpx.MockTransport`).
    Raises ConfigError, with the exact command to fix it, when a key is missing or the
    model cannot belong to the provider.
    """
    provider = settings.provider
    if provider == "none":
        return None
    if provider == "anthropic":
        try:  # the SDK and its httpx2 are the `llm` extra, not the base install
            import anthropic  # noqa: F401

            from memoryd.llm.anthropic_provider import AnthropicProvider
        except ImportError as exc:
            raise MissingExtra(
                'llm.provider = "anthropic"', "llm", exc.name or "anthropic"
            ) from exc

        return AnthropicProvider(
            api_key=_require_key(provider, api_key),
            model=settings.model,
            base_url=settings.base_url,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            transport=transport,
        )
    if provider == "openai":
        from memoryd.llm.openai_compat import OPENAI_BASE_URL, OpenAICompatProvider

        base_url = settings.base_url or OPENAI_BASE_URL
        _check_model(settings, official=settings.base_url is None)
        key = api_key or resolve_api_key(provider)
        if key is None and not _is_loopback(base_url):
            raise _missing_key(provider)
        return OpenAICompatProvider(
            api_key=key,
            model=settings.model,
            base_url=base_url,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            transport=transport,
        )
    if provider == "ollama":
        from memoryd.llm.ollama import OllamaProvider

        _check_model(settings, official=True)
        return OllamaProvider(
            model=settings.model,
            base_url=settings.base_url,
            api_key=api_key or os.environ.get(GENERIC_KEY_ENV) or None,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            transport=transport,
        )
    assert_never(provider)


def resolve_api_key(provider: str) -> str | None:
    """The API key for `provider` from the environment, else the OS keyring, else None."""
    for env in (GENERIC_KEY_ENV, PROVIDER_KEY_ENV.get(provider)):
        if env and (value := os.environ.get(env, "").strip()):
            logger.debug("%s API key taken from $%s", provider, env)
            return value
    return _key_from_keyring(provider)


def _key_from_keyring(provider: str) -> str | None:
    import keyring
    import keyring.errors

    try:
        value = keyring.get_password(KEYRING_SERVICE, keyring_username(provider))
    except keyring.errors.KeyringError as exc:
        # No usable backend (a headless box) is the same as no key stored.
        logger.debug("no keyring to read the %s API key from: %s", provider, exc)
        return None
    if value and value.strip():
        logger.debug("%s API key taken from the OS keyring", provider)
        return value.strip()
    return None


def _require_key(provider: str, explicit: str | None) -> str:
    key = explicit or resolve_api_key(provider)
    if key is None:
        raise _missing_key(provider)
    return key


def _missing_key(provider: str) -> ConfigError:
    return ConfigError(
        f"llm.provider is {provider!r} but no API key was found",
        hint=api_key_hint(provider),
    )


def _check_model(settings: LLMSettings, *, official: bool) -> None:
    """Catch the default Claude model left in place after switching provider."""
    if official and settings.model.startswith("claude"):
        example = "llama3.2" if settings.provider == "ollama" else "gpt-4o-mini"
        raise ConfigError(
            f"llm.model {settings.model!r} is a Claude model, but llm.provider is "
            f"{settings.provider!r}",
            hint=f"set llm.model to a {settings.provider} model (e.g. {example!r}) "
            "in the memoryd config or MEMORYD_LLM__MODEL",
        )


def _is_loopback(base_url: str) -> bool:
    return httpx.URL(base_url).host in _LOOPBACK_HOSTS
