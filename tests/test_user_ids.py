"""User ids are any string a user's system has (issue 39 item 7), and the invoker's own memory exists only once
written to (item 3). Real parts: the server in process and over stdio on SQLite files."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from mycelian_agent import InputError, build_agent
from mycelian_agent.integrations import MycelianStore
from mycelian_agent.recall.names import is_encoded, memory_title

IDS = [
    "alice",
    "u-1042",
    "alice@example.com",
    "Ünïcode name",
    "user_1",
    "user-1",
    str(uuid.uuid4()),
    "x" * 60,
    "a--aaaaaaaaaaaaaaaa",
]


def _memories(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as connection:
        return sorted(connection.execute("SELECT title, description FROM memories").fetchall())


def test_titles_are_ids_that_already_are_titles_else_a_stable_code() -> None:
    titles = [memory_title(user) for user in IDS]
    assert titles[:2] == ["alice", "u-1042"] and titles[6] == IDS[6]  # existing memories keep their titles
    assert titles[2].startswith("alice-example-com--") and is_encoded(titles[2])
    assert is_encoded(titles[8]) and titles[8] != IDS[8]  # a plain id shaped like a code is encoded too
    assert len(set(titles)) == len(IDS) and all(len(t) <= 50 for t in titles)
    assert [memory_title(user) for user in IDS] == titles  # stable
    for bad, problem in (
        ("", "is empty"),
        ("  ", "is empty"),
        (7, "must be a string"),
        ("a" * 256, "at most 255"),
        ("a\x00b", "NUL character"),
        ("a\ud83d", "lone surrogate"),
        ("\x01" * 200, "too long to keep"),
    ):
        with pytest.raises(InputError, match=problem):
            memory_title(bad)


@pytest.mark.parametrize("server", ["in-process", "embedded"])
async def test_any_id_gets_a_memory_of_its_own_shown_back_as_given(tmp_path: Path, server: str) -> None:
    db = tmp_path / "memory.db"
    async with build_agent("extractive", server=server, db=db, embeddings=False) as invoker:
        for user in IDS:
            await invoker.aprocess_conversation_message(
                "user", f"My id is {user}, I keep bees.", f"t-{user}", user=user
            )
        for user in IDS:
            hits = await invoker.asearch("bees", user=user)
            assert [hit.text for hit in hits] == [f"My id is {user}, I keep bees."] and hits[0].user == user
        spaces = await MycelianStore(invoker).alist_namespaces(max_depth=1)
        assert set(spaces) == {(user,) for user in IDS}
    rows = _memories(db)
    assert len(rows) == len(IDS)  # no memory of the invoker's own: nothing was written to it
    async with build_agent("extractive", server=server, db=db, embeddings=False) as again:  # a new process
        for user in IDS:
            assert len(await again.aget_all(user=user)) == 1
            memory_id = await again.reader.users.find(user)
            assert memory_id is not None and await again.reader.users.owner_of(memory_id) == user


async def test_reads_on_a_fresh_database_create_no_memory(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with build_agent("extractive", server="in-process", db=db, embeddings=False) as invoker:
        assert await invoker.asearch("anything") == []
        assert (await invoker.arecall("anything")).empty
        assert (await invoker.aget_all()).entries == ()
        assert await invoker.reader.default_memory() is None and invoker.agent.memory_id is None
        await invoker.astart_session("t1")  # reads the (missing) memory: nothing to read, nothing created
    # The vault is made when build_agent opens (every call names it); the memory only by a write.
    assert _memories(db) == []
    async with build_agent("extractive", server="in-process", db=db, embeddings=False) as invoker:
        before = db.read_bytes()
        assert await invoker.asearch("anything") == [] and (await invoker.aget_all()).entries == ()
        await invoker.aend_session("t1")  # nothing new: nothing written
        await invoker.aprocess_conversation_message("user", "I adopted a cat named Miso.", "t1")
        assert [hit.text for hit in await invoker.asearch("cat")] == ["I adopted a cat named Miso."]
    assert [title for title, _ in _memories(db)] == ["default"] and before != db.read_bytes()


def test_the_cli_finds_and_lists_a_user_by_the_id_given(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mycelian_agent.cli import cli as main

    db = tmp_path / "memory.db"
    with build_agent("extractive", server="in-process", db=db, embeddings=False) as invoker:
        invoker.process_conversation_message("user", "Dana plays the cello.", "t1", user="dana@example.com")
    runner = CliRunner()
    listed = runner.invoke(main, ["list", "--db", str(db)], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "dana@example.com" in listed.output and "default" not in listed.output
    found = runner.invoke(main, ["search", "cello", "--db", str(db), "--memory", "dana@example.com", "--json"])
    assert found.exit_code == 0, found.output
    assert '"Dana plays the cello."' in found.output and '"user": "dana@example.com"' in found.output
    added = runner.invoke(main, ["add", "Dana also sings in a choir.", "--db", str(db), "--memory", "dana@example.com"])
    assert added.exit_code == 0, added.output
    with build_agent("extractive", server="in-process", db=db, embeddings=False) as invoker:  # the same memory
        assert len(invoker.get_all(user="dana@example.com")) == 2
    assert len(_memories(db)) == 1
