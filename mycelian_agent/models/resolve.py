"""Resolving a model spec ("extractive" | "openai:<model>" | a BaseChatModel) to a chat model.

Settings (API key, base URL) come in as arguments: reading the environment is the caller's job (the CLI, the
builder), except that langchain-openai itself falls back to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.language_models.chat_models import BaseChatModel

from ..errors import ConfigError
from .extractive import ExtractiveChatModel, is_extractive

__all__ = ["ACCEPTED_FORMS", "model_name", "resolve_model"]

ACCEPTED_FORMS = (
    '"extractive" (the default, no network), "openai:<model>" (e.g. "openai:gpt-4o-mini"), or a BaseChatModel instance'
)

MaxTokensField = Literal["max_completion_tokens", "max_tokens"]


def resolve_model(
    spec: str | BaseChatModel | None = None,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
    timeout: float | None = None,
    max_retries: int = 2,
    max_tokens_field: MaxTokensField = "max_completion_tokens",
) -> BaseChatModel:
    """Return the chat model ``spec`` names.

    - ``None`` or ``"extractive"``: :class:`~mycelian_agent.models.extractive.ExtractiveChatModel` (other settings
      unused).
    - ``"openai:<model>"``: ``langchain_openai.ChatOpenAI``; ``api_key`` defaults to ``OPENAI_API_KEY`` and
      ``base_url`` to ``OPENAI_BASE_URL`` (read by langchain-openai). ``max_tokens_field="max_tokens"`` sends the
      limit as ``max_tokens`` for OpenAI-compatible servers that ignore ``max_completion_tokens``.
      ``temperature=None`` leaves it to the server (some reasoning models accept no other value).
    - a ``BaseChatModel`` instance: returned unchanged.

    Raises :class:`ConfigError` for any other value, or when the OpenAI model has no API key.
    """
    if isinstance(spec, BaseChatModel):
        return spec
    if spec is None:
        return ExtractiveChatModel()
    if not isinstance(spec, str):
        raise ConfigError(f"model must be {ACCEPTED_FORMS}; got a {type(spec).__name__}")
    if is_extractive(spec):
        return ExtractiveChatModel()
    text = spec.strip()
    provider, _, name = text.partition(":")
    if provider.strip().lower() != "openai" or not name.strip():
        raise ConfigError(f"unknown model {spec!r}: use {ACCEPTED_FORMS}")
    if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
        raise ConfigError(f"max_tokens_field must be 'max_completion_tokens' or 'max_tokens', got {max_tokens_field!r}")
    return _chat_openai(
        name.strip(),
        api_key=api_key,
        base_url=base_url,
        temperature=temperature,
        max_tokens=max_tokens,
        timeout=timeout,
        max_retries=max_retries,
        max_tokens_field=max_tokens_field,
    )


def _chat_openai(model: str, *, max_tokens: int | None, max_tokens_field: str, **settings: Any) -> BaseChatModel:
    # langchain-openai and openai take ~0.5 s to import: only pay for them when an OpenAI model is asked for.
    import openai
    from langchain_openai import ChatOpenAI
    from pydantic import ValidationError

    kwargs: dict[str, Any] = {key: value for key, value in settings.items() if value is not None}
    # Token accounting also when a graph streams the model (langchain-openai enables it only for api.openai.com).
    kwargs["stream_usage"] = True
    if max_tokens is not None:
        if max_tokens_field == "max_tokens":
            # langchain-openai renames max_tokens to max_completion_tokens; extra_body is sent as is.
            kwargs["extra_body"] = {"max_tokens": max_tokens}
        else:
            kwargs["max_tokens"] = max_tokens
    try:
        return ChatOpenAI(model=model, **kwargs)
    except openai.OpenAIError as exc:
        raise ConfigError(
            f"openai:{model} needs an API key: set OPENAI_API_KEY or pass api_key= "
            f"(any non-empty string for a local OpenAI-compatible server) ({exc})"
        ) from exc
    except (ValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid settings for openai:{model}: {exc}") from exc


def model_name(model: Any) -> str:
    """A short name for reports: ``"extractive"``, ``"openai:gpt-4o-mini"``, or the model's own name or type."""
    if isinstance(model, str):
        return model.strip() or "extractive"
    if model is None:
        return "extractive"
    inner = getattr(model, "bound", model)  # a model with bound tools is a RunnableBinding around it
    if isinstance(inner, ExtractiveChatModel):
        return "extractive"
    name = getattr(inner, "model_name", None) or getattr(inner, "model", None)
    llm_type = getattr(inner, "_llm_type", None)
    if isinstance(name, str) and name:
        return f"openai:{name}" if llm_type == "openai-chat" else name
    return llm_type if isinstance(llm_type, str) and llm_type else type(inner).__name__
