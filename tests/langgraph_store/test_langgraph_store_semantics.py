"""MycelianStore keeps LangGraph's store semantics where its own tests do not reach (issue 39 item 7): settings it
cannot honour are refused when it is built, an async call from another event loop works or fails at once, a
dotted filter key is a path, and no namespace shows that nobody wrote to. Real parts: the server in process on a
SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mycelian_agent import ConfigError, MycelianError, build_agent
from mycelian_agent.integrations import MycelianStore


def test_index_and_ttl_are_refused_when_the_store_is_built(tmp_path: Path) -> None:
    with build_agent("extractive", server="in-process", db=tmp_path / "m.db", embeddings=False) as invoker:
        with pytest.raises(ConfigError, match="does not take index="):
            MycelianStore(invoker, index={"dims": 4, "embed": "fake"})
        with pytest.raises(ConfigError, match="does not take ttl="):
            MycelianStore(invoker, ttl={"default_ttl": 5})


def test_an_async_call_from_another_event_loop_works_or_fails_at_once(tmp_path: Path) -> None:
    context = build_agent("extractive", server="in-process", db=tmp_path / "m.db", embeddings=False)
    with context as invoker:  # the invoker's loop runs in a thread of its own
        store = MycelianStore(invoker)

        async def elsewhere() -> object:  # a loop of this thread, not the invoker's
            await store.aput(("people", "bob@example"), "k", {"text": "Bob keeps bees"})
            return await store.aget(("people", "bob@example"), "k")

        item = asyncio.run(asyncio.wait_for(elsewhere(), 60))
        assert item is not None and item.value == {"text": "Bob keeps bees"}
    # the invoker's loop has stopped: an error at once, never a wait
    with pytest.raises(MycelianError, match="not running"):
        asyncio.run(asyncio.wait_for(store.aget(("people", "bob@example"), "k"), 10))


async def test_an_async_call_from_a_thread_with_its_own_loop(store: MycelianStore) -> None:
    await store.aput(("notes",), "k", {"text": "from the invoker's loop"})

    def other_thread() -> object:
        return asyncio.run(asyncio.wait_for(store.aget(("notes",), "k"), 60))

    item = await asyncio.wait_for(asyncio.to_thread(other_thread), 90)
    assert item is not None and item.value == {"text": "from the invoker's loop"}


async def test_a_dotted_filter_key_is_a_path_into_nested_fields(store: MycelianStore) -> None:
    await store.aput(("docs",), "a", {"access-level": "public", "user": {"access-level": "nested", "123abc": "ok"}})
    await store.aput(("docs",), "b", {"access-level": "private", "user": {"access-level": "other"}})
    assert [i.key for i in await store.asearch(("docs",), filter={"access-level": "public"})] == ["a"]
    assert [i.key for i in await store.asearch(("docs",), filter={"user.access-level": "nested"})] == ["a"]
    assert [i.key for i in await store.asearch(("docs",), filter={"user.123abc": "ok"})] == ["a"]
    # Filters are applied in Python, never put into SQL: a key written as SQL matches nothing.
    assert await store.asearch(("docs",), filter={"access') = 'public' OR '1'='1": "x"}) == []


async def test_no_namespace_nobody_wrote_to(store: MycelianStore) -> None:
    assert await store.alist_namespaces() == []
    assert await store.asearch(("default",)) == []
    await store.aput(("users", "ana at example", "prefs"), "tea", {"text": "green tea"})
    assert await store.alist_namespaces() == [("users", "ana at example", "prefs")]
