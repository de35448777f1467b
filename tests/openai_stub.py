"""A local OpenAI-compatible Chat Completions endpoint for tests: scripted replies, recorded requests.

    with OpenAIStub(responses=[tool_call_reply("add_entry", {"summary": "s", "tags": {}})]) as stub:
        model = resolve_model("openai:gpt-4o-mini", api_key="test", base_url=stub.base_url)
        ...
        assert stub.requests[0]["tool_choice"]["function"]["name"] == "add_entry"

Serves ``POST /v1/chat/completions`` (JSON, or Server-Sent Events when the request says ``"stream": true``) from a
``ThreadingHTTPServer`` on a free 127.0.0.1 port in a daemon thread. Each scripted item is a :class:`StubReply`
(build with :func:`tool_call_reply`, :func:`text_reply`, :func:`error_reply`), a completion ``dict`` sent as is, or a
callable ``(request_body) -> StubReply | dict`` for replies that depend on the request. When the script runs out the
stub answers HTTP 400 (not retried by the openai client) naming the request.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OpenAIStub", "StubReply", "error_reply", "slow_reply", "text_reply", "tool_call_reply"]

_ids = itertools.count(1)
Usage = tuple[int, int]


@dataclass
class StubReply:
    """One scripted answer: an assistant ``message`` (OpenAI wire format) or an HTTP error."""

    message: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = (10, 5)
    status: int = 200
    error: str = ""
    error_type: str = "invalid_request_error"
    finish_reason: str = "stop"
    delay: float = 0.0  # seconds to wait before answering (longer than the client's timeout: a timeout)


def tool_call_reply(name: str, args: Mapping[str, Any] | str, usage: Usage | None = (10, 5)) -> StubReply:
    """An assistant message calling tool ``name``; ``args`` a mapping (sent as a JSON string) or a raw string."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    call = {"id": f"call_stub_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return StubReply(message=message, usage=usage, finish_reason="tool_calls")


def text_reply(content: str, usage: Usage | None = (10, 5)) -> StubReply:
    """An assistant message with text and no tool call."""
    return StubReply(message={"role": "assistant", "content": content}, usage=usage)


def slow_reply(seconds: float, then: StubReply) -> StubReply:
    """``then``, answered after ``seconds`` (a client with a shorter timeout sees a timeout)."""
    return StubReply(
        message=then.message,
        usage=then.usage,
        status=then.status,
        error=then.error,
        error_type=then.error_type,
        finish_reason=then.finish_reason,
        delay=seconds,
    )


def error_reply(status: int, message: str = "stub error", error_type: str = "invalid_request_error") -> StubReply:
    """An HTTP error with an OpenAI-style ``{"error": {...}}`` body."""
    return StubReply(status=status, error=message, error_type=error_type)


def _completion(reply: StubReply, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"chatcmpl-stub-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": reply.message, "finish_reason": reply.finish_reason, "logprobs": None}],
    }
    if reply.usage is not None:
        prompt, completion = reply.usage
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return body


def _sse(completion: dict[str, Any], include_usage: bool) -> bytes:
    """The completion as a stream: one delta chunk with the whole message, a finish chunk, usage, [DONE]."""
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    for i, call in enumerate(delta.get("tool_calls") or []):
        delta["tool_calls"][i] = {"index": i, **call}
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage and "usage" in completion:
        chunks.append(base | {"choices": [], "usage": completion["usage"]})
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks).encode() + b"data: [DONE]\n\n"


class OpenAIStub:
    """A scripted OpenAI Chat Completions server on 127.0.0.1; a context manager (or ``start()`` / ``stop()``).

    ``requests`` holds each request body (parsed JSON) in arrival order, ``headers`` the matching request headers
    (names lower-cased).
    """

    def __init__(
        self, responses: list[StubReply | dict[str, Any] | Callable[[dict], Any]] | None = None, *, cycle: bool = False
    ) -> None:
        self.responses = list(responses or [])
        self.cycle = cycle
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._served = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: pass as ``base_url`` to an OpenAI client."""
        if self._server is None:
            raise RuntimeError("OpenAIStub is not running: use it as a context manager or call start()")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def add(self, *responses: StubReply | dict[str, Any] | Callable[[dict], Any]) -> None:
        """Append scripted replies."""
        with self._lock:
            self.responses.extend(responses)

    def start(self) -> OpenAIStub:
        """Start serving in a daemon thread."""
        stub = self

        class Handler(_Handler):
            owner = stub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for the serving loop to notice, 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> StubReply | dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self._served >= len(self.responses):
                if not (self.cycle and self.responses):
                    return error_reply(400, f"OpenAIStub: no scripted response left for request #{len(self.requests)}")
                self._served = 0
            item = self.responses[self._served]
            self._served += 1
        return item(body) if callable(item) else item


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAIStub
    protocol_version = "HTTP/1.1"  # as the openai client (httpx) speaks

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        # No keep-alive: langchain-openai caches its async httpx client per base URL for the life of the process,
        # and a pooled connection to a stub that has stopped is never closed (a ResourceWarning at exit, or in a
        # random later test when it is collected).
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def _send_error(self, status: int, message: str, error_type: str = "invalid_request_error") -> None:
        error = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        self._send(status, json.dumps(error).encode())

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_error(404, f"OpenAIStub serves POST /v1/chat/completions, not {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send_error(400, f"OpenAIStub: request body is not JSON: {exc}")
            return
        reply = self.owner._next_reply(body, {key.lower(): value for key, value in self.headers.items()})
        if isinstance(reply, StubReply) and reply.delay:
            time.sleep(reply.delay)
        try:
            self._answer(body, reply)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (its timeout)
            self.close_connection = True

    def _answer(self, body: dict[str, Any], reply: StubReply | dict[str, Any]) -> None:
        if isinstance(reply, StubReply) and reply.status != 200:
            self._send_error(reply.status, reply.error, reply.error_type)
            return
        completion = reply if isinstance(reply, dict) else _completion(reply, str(body.get("model", "stub")))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send(200, _sse(completion, include_usage), "text/event-stream")
        else:
            self._send(200, json.dumps(completion).encode())

    def do_GET(self) -> None:
        self._send_error(404, f"OpenAIStub serves POST /v1/chat/completions, not GET {self.path}")
