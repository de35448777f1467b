"""Property-based fuzzing (hypothesis) of the two trust boundaries: the conversation loader and the memory server's
tool arguments. Case counts come from the settings profiles in conftest.py ("ci": 10,000 cases in all, drawn in
batches of 4-8 per hypothesis example).

- The loader answers any input with conversations or an InputError naming the source; never another exception.
- Whatever the loader accepts can be stored: every argument the agent would send passes the server's checks.
- A tool call with any arguments gets a result or an error result, and an error result changes no row.
"""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mycelian_agent._sync import LoopThread
from mycelian_agent.agent.entries import entry_tags, idempotency_key
from mycelian_agent.agent.model_tools import AddEntryArgs
from mycelian_agent.conversations.formats import iter_messages, parse_conversation_data, parse_json_text, valid_title
from mycelian_agent.errors import InputError
from mycelian_agent.limits import RAW_ENTRY_MAX_CHARS, SUMMARY_MAX_CHARS, TAG_VALUE_MAX_CHARS, clip_tags, split_oversize
from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.storage.validation import (
    check_idempotency_key,
    check_tags,
    check_text,
    check_title,
    parse_rfc3339,
)
from mycelian_agent.memory_server.testing import BackgroundSession

# Characters chosen to break things: controls, NUL, combining and zero-width marks, right-to-left text, a character
# outside the BMP and lone surrogates (JSON's "\ud83d" escapes decode to them). Sampling from a pool keeps case
# generation cheap, so the CI profile's ~10k cases stay within a minute.
CHARS = st.sampled_from(
    list("aZ09 -_:.\n\t\r\x00\x7f\u00e9\u0301\u200b\u202e\u05d0\ufeff\uffff\U0001f600\ud83d\ude00\udc00")
)
WORDS = st.sampled_from(
    [
        "user",
        "assistant",
        "human",
        "ai",
        "robot",
        "",
        " ",
        "\n",
        "2024-05-01T10:00:00Z",
        "2024-02-30",
        "May 1, 2024",
        "2023/05/20 (Sat) 02:21",
        "0001-01-01T00:00:00+14:00",
        "session_id",
        "turn",
        "role",
        "thread",
        "msg",
        "part",
        "\ud83d",
        "a\udc00b",
        "x" * 65,
        "y" * 513,
        "caf\u00e9 \U0001f600",
    ]
)
TEXT = st.text(CHARS, max_size=10) | WORDS
SCALARS = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | TEXT
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=6
)
TAGS = st.dictionaries(TEXT, TEXT, max_size=30) | JSON
MESSAGE = st.fixed_dictionaries(
    {"role": WORDS | JSON, "content": TEXT | JSON}, optional={"name": TEXT | JSON, "tags": TAGS, "extra": JSON}
)
MESSAGES = st.lists(MESSAGE, max_size=4) | JSON
TIME = WORDS | JSON
MESSAGES_DOC = st.fixed_dictionaries(
    {"messages": MESSAGES}, optional={"conversation_id": TEXT | JSON, "conversation_time": TIME}
)
SESSION = st.fixed_dictionaries({"session_id": TEXT | JSON, "messages": MESSAGES}, optional={"conversation_time": TIME})
SESSIONS_DOC = st.fixed_dictionaries(
    {"sessions": st.lists(SESSION, max_size=3) | JSON}, optional={"conversation_id": TEXT | JSON}
)
TURN = st.fixed_dictionaries({"role": WORDS | JSON, "content": TEXT | JSON}, optional={"has_answer": SCALARS})
LONGMEMEVAL_DOC = st.fixed_dictionaries(
    {
        "question_id": TEXT,
        "question_type": TEXT,
        "question": TEXT,
        "answer": SCALARS,
        "answer_session_ids": JSON,
        "haystack_session_ids": st.lists(TEXT, max_size=3),
        "haystack_dates": st.lists(TIME, max_size=3),
        "haystack_sessions": st.lists(st.lists(TURN, max_size=3), max_size=3),
    },
    optional={"question_date": TIME},
)
DOC = MESSAGES_DOC | SESSIONS_DOC | LONGMEMEVAL_DOC | st.lists(MESSAGES_DOC | SESSIONS_DOC, max_size=3) | JSON

CODE_TAGS = {"role": "user", "thread": "t", "msg": "1", "part": "1/2"}


def share(fraction: float, batch: int) -> settings:
    """This test's share of the profile's cases (the "ci" profile: 2,500 a test on average, 10,000 in all), drawn
    ``batch`` cases per hypothesis example: generating one example has a fixed cost several times a case's."""
    return settings(max_examples=max(10, int(settings.default.max_examples * fraction / batch)))


def batches(strategy: st.SearchStrategy, size: int) -> st.SearchStrategy:
    return st.lists(strategy, min_size=size, max_size=size)


def assert_storable(conversations: list) -> None:
    """Every argument the agent would send for these conversations passes the memory server's checks."""
    for conversation in conversations:
        check_title("title", valid_title(conversation.conversation_id))
        thread = conversation.conversation_id
        for position in iter_messages(conversation):
            message = position.message
            parts = split_oversize(message.content, RAW_ENTRY_MAX_CHARS)
            for i, part in enumerate(parts):
                check_text("raw_entry", part, RAW_ENTRY_MAX_CHARS)
                check_idempotency_key(idempotency_key(thread, 1, message.content, i, len(parts)))
            code = {**CODE_TAGS, "thread": thread[:TAG_VALUE_MAX_CHARS]}
            check_tags(entry_tags({}, clip_tags(message.tags), code))
            if position.session.conversation_time:
                parse_rfc3339(position.session.conversation_time)
            if message.name is not None:
                message.name.encode("utf-8")


@share(1.0, batch=4)
@given(batches(DOC, 4))
def test_the_loader_accepts_storable_conversations_or_names_the_problem(inputs: list[Any]) -> None:
    for data in inputs:
        try:
            conversations = parse_conversation_data(data, "fuzz.json")
        except InputError as exc:
            assert str(exc).startswith("fuzz.json: ")
            str(exc).encode("utf-8")  # printable: no surrogate is echoed back
            continue
        assert_storable(conversations)


JSON_TEXT = st.one_of(
    st.builds(lambda d: json.dumps(d, ensure_ascii=False, allow_nan=True), DOC),
    st.builds(lambda d: json.dumps(d), DOC),
    st.text(st.sampled_from(string.printable + '[]{}"\\\u00e9\ud83d'), max_size=60),
    st.builds(lambda n, c: c * n, st.integers(0, 300), st.sampled_from(["[", '{"a":', '[[{"messages":'])),
    st.builds(
        lambda n: '{"messages": [{"role": "user", "content": "x", "tags": {"n": ' + "9" * n + "}}]}",
        st.integers(1, 6000),
    ),
)


@share(1.2, batch=4)
@given(batches(JSON_TEXT, 4))
def test_json_text_of_any_shape_is_read_or_refused_with_the_source(texts: list[str]) -> None:
    for text in texts:
        try:
            conversations = parse_conversation_data(parse_json_text(text, "fuzz.json"), "fuzz.json")
        except InputError as exc:
            assert str(exc).startswith("fuzz.json: ")
            continue
        assert_storable(conversations)


@pytest.fixture(scope="module")
def served():
    """One in-memory server session with a vault, a memory and an entry, driven from a loop thread (hypothesis
    runs each case synchronously)."""
    portal = LoopThread()

    async def start() -> tuple[BackgroundSession, dict[str, str]]:
        bg = await BackgroundSession.start(create_server(":memory:"))
        vault = json.loads((await bg.session.call_tool("create_vault", {"title": "v"})).content[0].text)["vaultId"]
        memory = json.loads(
            (
                await bg.session.call_tool(
                    "create_memory_in_vault", {"vault_id": vault, "title": "m", "memory_type": "NOTES"}
                )
            )
            .content[0]
            .text
        )["memoryId"]
        entry = json.loads(
            (
                await bg.session.call_tool(
                    "add_entry",
                    {
                        "vault_id": vault,
                        "memory_id": memory,
                        "raw_entry": "seed",
                        "summary": "seed",
                        "idempotency_key": "k",
                    },
                )
            )
            .content[0]
            .text
        )["entryId"]
        return bg, {"vault_id": vault, "memory_id": memory, "entry_id": entry}

    bg, ids = portal.run(start())
    yield portal, bg, ids
    portal.run(bg.aclose())
    portal.close()


TOOLS = [
    "create_vault",
    "list_vaults",
    "create_memory_in_vault",
    "list_memories",
    "get_memory",
    "add_entry",
    "list_entries",
    "get_entry",
    "put_context",
    "get_context",
    "await_consistency",
    "search_memories",
    "get_default_prompts",
    "delete_entry",
    "delete_memory",
    "update_entry",
    "list_entry_versions",
]
ARG_NAMES = [
    "vault_id",
    "memory_id",
    "entry_id",
    "title",
    "memory_type",
    "description",
    "raw_entry",
    "summary",
    "tags",
    "conversation_time",
    "idempotency_key",
    "limit",
    "before",
    "after",
    "content",
    "query",
    "top_ke",
    "top_kc",
    "include_raw_entries",
    "unknown",
]


@st.composite
def tool_calls(draw: st.DrawFn, ids: dict[str, str]) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(TOOLS))
    keys = draw(st.lists(st.sampled_from(ARG_NAMES), max_size=7, unique=True))
    # Dict keys without surrogates: the MCP client cannot even send those (the loader and MemoryConnection refuse them).
    value = (
        st.sampled_from(list(ids.values()))
        | SCALARS
        | st.dictionaries(st.text(max_size=8), TEXT | SCALARS, max_size=3)
        | st.just("2024-05-01T10:00:00Z")
        | st.integers(-2, 60)
    )
    arguments = {key: draw(value) for key in keys}
    if draw(st.booleans()):  # often the right ids, so that the deeper checks are reached
        arguments = {**{k: v for k, v in ids.items() if k != "entry_id"}, **arguments}
    return name, arguments


@share(0.4, batch=4)  # each case is a real MCP call plus two row counts
@given(st.data())
def test_any_tool_arguments_get_an_answer_and_an_error_changes_no_row(served, data: st.DataObject) -> None:
    portal, bg, ids = served
    for _ in range(4):
        check_tool_call(portal, bg, ids, *data.draw(tool_calls(ids)))


def check_tool_call(
    portal: LoopThread, bg: BackgroundSession, ids: dict[str, str], name: str, arguments: dict[str, Any]
) -> None:
    if name in ("delete_entry", "delete_memory") and arguments.get("memory_id") == ids["memory_id"]:
        arguments["memory_id"] = "00000000-0000-4000-8000-000000000000"  # keep the seed memory for later cases

    async def call() -> tuple[Any, Any, Any]:
        before = await bg.runner.call(Store.counts)
        result = await bg.session.call_tool(name, arguments)
        return before, result, await bg.runner.call(Store.counts)

    before, result, after = portal.run(call())
    text = "".join(getattr(block, "text", "") for block in result.content)
    text.encode("utf-8")
    if result.isError:
        assert after == before, (name, arguments, text)
        assert "Traceback" not in text and text.strip()
    elif name not in ("get_context", "await_consistency"):
        json.loads(text)


@share(1.42, batch=8)  # 2,500 + 3,000 + 1,000 + 3,544 = 10,044 cases in the "ci" profile
@given(batches(st.fixed_dictionaries({}, optional={"summary": TEXT | JSON, "tags": TAGS, "other": JSON}), 8))
def test_any_model_reply_is_refused_or_gives_arguments_the_server_accepts(replies: list[dict[str, Any]]) -> None:
    for reply in replies:
        try:
            args = AddEntryArgs.model_validate(reply)
        except ValidationError:
            continue
        check_text("summary", args.summary, SUMMARY_MAX_CHARS)
        check_tags(entry_tags(args.tags, {"session_id": "s1", "turn": "0"}, CODE_TAGS))
