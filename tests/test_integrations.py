"""The LangChain / LangGraph doors (mycelian_agent.integrations) against the real memory server and real LangGraph.

The server runs in-process (``server="in-process"`` on ``:memory:``: the same FastMCP app and tools, no subprocess)
except in one test over the embedded stdio server. The memory agent uses the extractive model (no network).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, PutOp, SearchItem, SearchOp
from typing_extensions import TypedDict

from mycelian_agent import MycelianError, build_agent
from mycelian_agent.errors import InputError
from mycelian_agent.integrations import (
    MycelianRetriever,
    MycelianStore,
    make_manage_memory_tool,
    make_search_memory_tool,
    namespace_title,
)
from mycelian_agent.integrations.store import CREATED_TAG, KEY_TAG

ALICE = {"configurable": {"user_id": "alice"}}
BOB = {"configurable": {"user_id": "bob"}}


def in_process(**options: Any):
    return build_agent("extractive", server="in-process", db=":memory:", **options)


async def _seed(invoker) -> None:
    await invoker.aprocess_conversation_messages(
        "a1",
        [
            {"role": "user", "content": "My dog Rex loves running on the beach in Santa Cruz."},
            {"role": "assistant", "content": "Rex sounds like a happy dog!"},
        ],
        user="alice",
    )
    await invoker.aprocess_conversation_messages(
        "b1",
        [
            {"role": "user", "content": "I have been learning to play the cello since March."},
            {"role": "assistant", "content": "The cello is a beautiful instrument."},
        ],
        user="bob",
    )


@pytest.fixture
async def invoker():
    async with in_process() as ready:
        await _seed(ready)
        yield ready


# -- retriever -------------------------------------------------------------------------------------------------


async def test_retriever_documents_carry_the_hit_and_users_stay_apart(invoker) -> None:
    retriever = MycelianRetriever(memory=invoker, k=3)
    docs = await retriever.ainvoke("where does my dog run?", ALICE)
    assert docs and all(isinstance(doc, Document) for doc in docs)
    best = docs[0]
    assert best.page_content == "My dog Rex loves running on the beach in Santa Cruz."
    meta = best.metadata
    assert set(meta) == {
        "entry_id",
        "summary",
        "speaker",
        "role",
        "time",
        "thread",
        "score",
        "match",
        "user",
        "memory_id",
    }
    assert (meta["role"], meta["thread"], meta["user"]) == ("user", "a1", "alice")
    assert meta["score"] > 0 and meta["summary"] and meta["time"] and best.id == meta["entry_id"]
    assert len(docs) <= 3

    bobs = await retriever.ainvoke("dog beach Rex", BOB)  # bob's memory holds nothing about a dog
    assert all("Rex" not in doc.page_content and doc.metadata["user"] == "bob" for doc in bobs)
    # the field is the fallback; the config's user_id wins over it
    fixed = MycelianRetriever(memory=invoker.reader, user="bob", k=2)
    assert "cello" in (await fixed.ainvoke("which instrument?"))[0].page_content
    assert "Rex" in (await fixed.ainvoke("dog", ALICE))[0].page_content


async def test_retriever_in_a_chain_gets_the_user_from_the_config(invoker) -> None:
    chain = MycelianRetriever(memory=invoker) | RunnableLambda(lambda docs: [d.page_content for d in docs])
    assert any("cello" in text for text in await chain.ainvoke("cello", BOB))
    assert not any("cello" in text for text in await chain.ainvoke("cello", ALICE))


def test_retriever_sync_outside_a_loop() -> None:
    with in_process() as invoker:
        invoker.process_conversation_message("user", "My sister Ana lives in Lisbon.", "t1", user="carol")
        retriever = MycelianRetriever(memory=invoker, user="carol")
        docs = retriever.invoke("where does my sister live?")
        assert docs[0].page_content == "My sister Ana lives in Lisbon."
        assert retriever.batch(["sister", "Lisbon"])[1][0].metadata["user"] == "carol"


async def test_retriever_refuses_bad_input(invoker) -> None:
    retriever = MycelianRetriever(memory=invoker)
    with pytest.raises(InputError, match="query is empty"):
        await retriever.ainvoke("   ", ALICE)
    with pytest.raises(InputError, match="user '' is empty"):
        await retriever.ainvoke("dog", {"configurable": {"user_id": ""}})
    with pytest.raises(InputError, match="user must be a string, got int"):
        await retriever.ainvoke("dog", {"configurable": {"user_id": 42}})
    with pytest.raises(InputError, match="k must be an integer from 1 to 100"):
        MycelianRetriever(memory=invoker, k=0)
    with pytest.raises(MycelianError, match="invoker build_agent"):
        MycelianRetriever(memory=object())
    with pytest.raises(MycelianError, match="inside a running event loop"):
        retriever.invoke("dog", ALICE)  # sync inside the loop: refused, never a deadlock


@pytest.mark.parametrize("create_users", [True, False])
async def test_reads_of_an_unknown_user_return_nothing_and_create_nothing(create_users: bool) -> None:
    async with in_process(create_users=create_users) as invoker:
        if create_users:
            await _seed(invoker)
        vault = invoker.reader.vault_id

        async def titles() -> list[str]:
            return sorted(m["title"] for m in await invoker.connection.call_json("list_memories", {"vault_id": vault}))

        before = await titles()
        zoe = {"configurable": {"user_id": "zoe"}}
        assert await MycelianRetriever(memory=invoker).ainvoke("dog", zoe) == []
        block = await make_search_memory_tool(invoker).ainvoke({"query": "dog"}, zoe)
        assert "Memory holds nothing about this yet." in block and "Rex" not in block
        store = MycelianStore(invoker)
        assert await store.aget(("zoe",), "k") is None
        assert await store.asearch(("zoe",), query="dog") == []
        assert await store.asearch(("notes", "zoe")) == []
        assert await titles() == before  # nothing created by any of those reads
        if not create_users:
            with pytest.raises(InputError, match="creation is off"):
                await store.aput(("notes", "zoe"), "k", {"text": "hello"})
        else:
            await store.aput(("notes", "zoe"), "k", {"text": "hello"})  # a write creates
            assert await titles() == sorted([*before, "notes-zoe"])


# -- the search_memory tool ------------------------------------------------------------------------------------


async def test_search_memory_tool_returns_the_recall_block(invoker) -> None:
    tool = make_search_memory_tool(invoker, budget_tokens=400)
    assert tool.name == "search_memory" and set(tool.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    block = await tool.ainvoke({"query": "where does my dog run?"}, ALICE)
    recalled = await invoker.arecall("where does my dog run?", user="alice", budget_tokens=400)
    assert block == recalled.as_prompt()
    assert block.startswith("Long-term memory relevant to: where does my dog run?")
    assert "Santa Cruz" in block and "cello" not in block
    fixed = make_search_memory_tool(invoker, user="bob")
    assert "cello" in await fixed.ainvoke({"query": "instrument cello"})
    # an empty query is the tool's answer, for the model to correct
    assert "query is empty" in await tool.ainvoke({"query": " "}, ALICE)
    with pytest.raises(InputError, match="budget_tokens"):
        make_search_memory_tool(invoker, budget_tokens=5)


async def test_search_memory_tool_in_a_langgraph_tool_node(invoker) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([make_search_memory_tool(invoker)]))
    graph.add_edge(START, "tools")
    app = graph.compile()
    call = AIMessage("", tool_calls=[{"name": "search_memory", "args": {"query": "cello"}, "id": "c1"}])
    out = await app.ainvoke({"messages": [call]}, BOB)
    assert "learning to play the cello" in out["messages"][-1].content
    out = await app.ainvoke({"messages": [call]}, ALICE)
    assert "learning to play the cello" not in out["messages"][-1].content


# -- the manage_memory tool ------------------------------------------------------------------------------------


async def test_manage_memory_tool_tells_the_model_what_it_got_wrong(invoker) -> None:
    tool = make_manage_memory_tool(invoker)
    assert tool.name == "manage_memory"
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"content", "action", "id"}
    created = await tool.ainvoke({"content": "Alice takes the 8:15 train."}, ALICE)
    note = created.removeprefix("created memory ")
    assert (await invoker.aget(note, user="alice")).text == "Alice takes the 8:15 train."
    fixed = make_manage_memory_tool(invoker, user="bob")  # the config's user_id wins over the fixed one
    answers = [
        await tool.ainvoke(args, ALICE)
        for args in (
            {"action": "create"},
            {"action": "update", "content": "x"},
            {"action": "delete"},
            {"action": "create", "content": "x", "id": note},
            {"action": "delete", "id": "the train one"},
            {"action": "update", "id": note, "content": " "},
        )
    ]
    assert [answer.split(":")[0] for answer in answers] == [
        "content is empty",
        "id is missing",
        "id is missing",
        "create makes a new memory and takes no id; use action 'update' to change one",
        "entry id 'the train one' is not an entry id",
        "content is empty",
    ]
    refused = await fixed.ainvoke({"action": "delete", "id": note})
    assert f"entry {note} not found in the memory of user 'bob'" in refused
    assert (await fixed.ainvoke({"action": "delete", "id": note}, ALICE)) == f"deleted memory {note}"
    with pytest.raises(MycelianError, match="the invoker build_agent"):
        make_manage_memory_tool(invoker.reader)
    with pytest.raises(InputError, match="at most 255"):
        await tool.ainvoke({"content": "x"}, {"configurable": {"user_id": "a" * 256}})


# -- the LangGraph store ---------------------------------------------------------------------------------------


async def test_store_put_get_search_delete_list(invoker) -> None:
    store = MycelianStore(invoker)
    ns = ("memories", "alice")
    assert namespace_title(ns) == "memories-alice"
    await store.aput(ns, "tea", {"content": "Alice prefers green tea in the morning"})
    await store.aput(ns, "food", {"dish": "pizza", "rating": 5})
    await store.aput(("memories", "u-1042"), "hike", {"text": "Likes hiking in the Alps"})

    item = await store.aget(ns, "food")
    assert (item.namespace, item.key, item.value) == (ns, "food", {"dish": "pizza", "rating": 5})
    assert (await store.aget(ns, "tea")).value == {"content": "Alice prefers green tea in the morning"}
    assert await store.aget(ns, "nothing") is None
    assert await store.aget(("memories", "nobody"), "tea") is None

    # an update appends the new version and deletes the old one; created_at survives
    first = await store.aget(ns, "tea")
    await store.aput(ns, "tea", {"content": "Alice switched to black tea"})
    updated = await store.aget(ns, "tea")
    assert updated.value == {"content": "Alice switched to black tea"}
    assert updated.created_at == first.created_at < updated.updated_at
    entries = await _entries(invoker, "memories-alice")
    assert sorted(e["tags"][KEY_TAG] for e in entries) == ["food", "tea"]
    assert CREATED_TAG in next(e["tags"] for e in entries if e["tags"][KEY_TAG] == "tea")

    hits = await store.asearch(("memories",), query="black tea")
    assert isinstance(hits[0], SearchItem) and hits[0].key == "tea" and hits[0].score > 0
    assert {hit.namespace for hit in hits} <= {ns, ("memories", "u-1042")}
    assert [h.key for h in await store.asearch(("memories",), query="hiking Alps", limit=1)] == ["hike"]
    assert [h.key for h in await store.asearch(ns, filter={"rating": {"$gte": 4}})] == ["food"]
    assert [h.key for h in await store.asearch(ns, query="pizza tea", filter={"dish": "pizza"})] == ["food"]
    listed = await store.asearch(ns)  # no query: newest first
    assert [h.key for h in listed] == ["tea", "food"] and listed[0].score is None

    namespaces = await store.alist_namespaces()
    assert {("memories", "alice"), ("memories", "u-1042"), ("alice",), ("bob",)} <= set(namespaces)
    assert ("default",) not in namespaces  # nobody wrote to the invoker's own memory: it does not exist
    assert await store.alist_namespaces(prefix=("memories",)) == [("memories", "alice"), ("memories", "u-1042")]
    assert await store.alist_namespaces(suffix=("u-1042",)) == [("memories", "u-1042")]
    assert ("memories",) in await store.alist_namespaces(max_depth=1)

    await store.adelete(ns, "tea")
    assert await store.aget(ns, "tea") is None
    assert [h.key for h in await store.asearch(ns)] == ["food"]
    results = await store.abatch(
        [PutOp(ns, "a", {"text": "one"}), GetOp(ns, "a"), PutOp(ns, "a", None), GetOp(ns, "a")]
    )
    assert results[0] is None and results[1].value == {"text": "one"} and results[3] is None


async def _entries(invoker, title: str) -> list[dict[str, Any]]:
    memories = await invoker.connection.call_json("list_memories", {"vault_id": invoker.reader.vault_id})
    memory_id = next(m["memoryId"] for m in memories if m["title"] == title)
    page = await invoker.connection.call_json(
        "list_entries", {"vault_id": invoker.reader.vault_id, "memory_id": memory_id, "limit": 50}
    )
    return page["entries"]


async def test_store_sees_the_conversation_of_a_user_namespace(invoker) -> None:
    store = MycelianStore(invoker)
    hits = await store.asearch(("alice",), query="dog beach")
    turn = hits[0]
    assert turn.value["text"] == "My dog Rex loves running on the beach in Santa Cruz."
    assert turn.value["tags"]["role"] == "user" and (await store.aget(("alice",), turn.key)).value == turn.value
    # an item put into the user's namespace shows in the user's recall
    await store.aput(("alice",), "vet", {"text": "Rex's vet is Dr. Ortiz on Pine Street"})
    recall = await invoker.arecall("who is Rex's vet?", user="alice")
    assert "Dr. Ortiz" in recall.as_prompt()


async def test_store_refuses_bad_namespaces_and_values(invoker) -> None:
    store = MycelianStore(invoker)
    with pytest.raises(InputError, match="label '  ' is empty"):
        await store.aput(("memories", "  "), "k", {"text": "x"})
    with pytest.raises(InputError, match="at most 255"):
        await store.aput(("memories", "x" * 256), "k", {"text": "x"})
    with pytest.raises(InputError, match="too long to keep in a memory's description"):
        await store.aput(tuple(["x" * 200] * 5), "k", {"text": "x"})
    with pytest.raises(InputError, match="namespace_prefix must be a tuple of strings"):
        await store.abatch([SearchOp(("memories", 7), query="x")])
    with pytest.raises(InputError, match="not JSON data"):
        await store.aput(("notes",), "k", {"when": object()})
    with pytest.raises(InputError, match="at most 9000"):
        await store.aput(("notes",), "k", {"text": "x" * 9001})
    with pytest.raises(InputError, match="unsupported filter operator"):
        await store.asearch(("alice",), filter={"text": {"$regex": "x"}})
    # Issue 40 item 5: refused up front, not by the server nor stored changed ({None: 1} came back {'null': 1}).
    with pytest.raises(InputError, match=r"key 'a\\x00b': a NUL character"):
        await store.aput(("notes",), "a\x00b", {"text": "x"})
    with pytest.raises(InputError, match=r"key 'a\\x00b': a NUL character"):
        await store.aget(("notes",), "a\x00b")
    with pytest.raises(InputError, match=r"has the key None \(NoneType\): JSON keys are strings"):
        await store.aput(("notes",), "k", {None: 1, "x": 2})
    for bad in (float("nan"), float("inf"), [1.0, float("-inf")]):
        with pytest.raises(InputError, match="not a JSON number"):
            await store.aput(("notes",), "k", {"x": bad, "y": 1})
    with pytest.raises(InputError, match="query: invalid Unicode: lone surrogate"):
        await store.asearch(("alice",), query="dog \ud83d")
    for option in ({"limit": -1}, {"offset": -1}):
        with pytest.raises(InputError, match=f"{next(iter(option))} must be a non-negative integer, got -1"):
            await store.alist_namespaces(**option)
    with pytest.raises(InputError, match="max_depth must be a positive integer"):
        await store.alist_namespaces(max_depth=0)
    await store.aput(("a", "b"), "k", {"text": "first"})
    with pytest.raises(InputError, match=r"maps to the memory 'a-b', which holds namespace \('a', 'b'\)"):
        await store.aput(("a-b",), "k", {"text": "second"})


async def test_store_in_a_compiled_graph(invoker) -> None:
    class State(TypedDict):
        user: str
        fact: str
        found: list[str]
        saved: bool

    async def save(state: State, runtime: Runtime) -> dict[str, Any]:
        await runtime.store.aput(("facts", state["user"]), "latest", {"content": state["fact"]})
        return {"saved": True}

    def look_up(state: State) -> dict[str, Any]:  # a sync node: LangGraph runs it in a worker thread
        store = get_store()
        items = store.search(("facts", state["user"]), query="where does the user live")
        return {
            "found": [item.value["content"] for item in items]
            + [store.get(("facts", state["user"]), "latest").value["content"]]
        }

    graph = StateGraph(State)
    graph.add_node("save", save)
    graph.add_node("look_up", look_up)
    graph.add_edge(START, "save")
    graph.add_edge("save", "look_up")
    app = graph.compile(store=MycelianStore(invoker))
    out = await app.ainvoke({"user": "dana", "fact": "Dana lives in Porto", "found": [], "saved": False})
    assert out["found"] == ["Dana lives in Porto", "Dana lives in Porto"]
    other = await app.ainvoke({"user": "eli", "fact": "Eli lives in Oslo", "found": [], "saved": False})
    assert other["found"] == ["Eli lives in Oslo", "Eli lives in Oslo"]


def test_store_sync_api_outside_a_loop() -> None:
    with in_process() as invoker:
        store = MycelianStore(invoker)
        store.put(("prefs", "finn"), "color", {"content": "Finn's favourite colour is teal"})
        assert store.get(("prefs", "finn"), "color").value == {"content": "Finn's favourite colour is teal"}
        assert store.search(("prefs",), query="favourite colour")[0].key == "color"
        assert store.list_namespaces(prefix=("prefs",)) == [("prefs", "finn")]
        store.delete(("prefs", "finn"), "color")
        assert store.get(("prefs", "finn"), "color") is None


async def test_over_the_embedded_stdio_server(tmp_path) -> None:
    async with build_agent("extractive", db=tmp_path / "memory.db") as invoker:  # server="embedded": spawned, stdio
        await invoker.aprocess_conversation_message("user", "I keep bees on my roof in Berlin.", "g1", user="gus")
        store = MycelianStore(invoker)
        await store.aput(("memories", "gus"), "bees", {"content": "Gus keeps three beehives"})
        await store.aput(("memories", "gus"), "bees", {"content": "Gus keeps four beehives"})
        assert (await store.aget(("memories", "gus"), "bees")).value == {"content": "Gus keeps four beehives"}
        assert [i.key for i in await store.asearch(("memories", "gus"), query="beehives")] == ["bees"]
        docs = await MycelianRetriever(memory=invoker).ainvoke("bees roof", {"configurable": {"user_id": "gus"}})
        assert docs[0].page_content == "I keep bees on my roof in Berlin."
        block = await make_search_memory_tool(invoker, user="gus").ainvoke({"query": "where are the bees?"})
        assert "Berlin" in block


async def test_store_sees_writes_and_deletes_of_another_store(invoker) -> None:
    """Two stores (two processes' worth of caches) on one memory: each sees what the other wrote and deleted."""
    one, two = MycelianStore(invoker), MycelianStore(invoker)
    ns = ("shared", "team")
    await one.aput(ns, "k", {"text": "v1"})
    assert (await two.aget(ns, "k")).value == {"text": "v1"}
    await two.aput(ns, "k", {"text": "v2"})
    assert (await one.aget(ns, "k")).value == {"text": "v2"}
    await one.adelete(ns, "k")
    assert await two.aget(ns, "k") is None
    assert await asyncio.gather(one.aget(ns, "k"), two.asearch(ns)) == [None, []]
