"""The read side: typed search hits, the recall block, many users on one invoker (isolation, binding kept in the
checkpoint, over HTTP with per-token vaults, 1,000 users on one server process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mycelian_agent import InputError, build_agent
from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.testing import serve_http
from mycelian_agent.recall import MemoryHit, Recall, estimate_tokens

TRIP = [  # (role, text, name): a small memory whose answer turn holds none of the question's words but "Lisbon"
    ("user", "My partner Marco and I want to go to Lisbon in June.", "Dana"),
    ("assistant", "Lovely! Which dates are you thinking of?", None),
    ("user", "June 14 to June 21, flying from Amsterdam.", "Dana"),
    ("assistant", "Noted: June 14-21 from Amsterdam.", None),
    ("user", "Marco is vegetarian, by the way.", "Dana"),
    ("assistant", "I'll keep restaurant tips vegetarian-friendly.", None),
    ("user", "My sister Ana adopted a beagle called Pixel.", "Dana"),
    ("assistant", "Pixel is a great name for a beagle!", None),
]


async def _tell(invoker, thread: str, turns, *, user: str | None = None, day: str = "2024-03-02") -> None:
    await invoker.astart_session(thread, f"{day}T18:00:00Z", user=user)
    for minute, (role, text, name) in enumerate(turns):
        await invoker.aprocess_conversation_message(role, text, thread, f"{day}T18:{minute:02d}:00Z", name=name)
    await invoker.aend_session(thread)


async def test_search_returns_typed_hits_with_the_verbatim_text_speaker_time_and_thread(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", TRIP, user="dana")
        hits = await invoker.asearch("beagle", user="dana", top_k=3)
        assert hits and all(isinstance(hit, MemoryHit) for hit in hits)
        best = next(hit for hit in hits if hit.role == "user")  # which of the two ranks first is search's business
        assert best.text == "My sister Ana adopted a beagle called Pixel."
        assert (best.speaker, best.role, best.thread, best.user) == ("Dana", "user", "dana-1", "dana")
        assert best.time == "2024-03-02T18:06:00.000000Z" and best.score > 0 and best.summary
        assert all(
            hit.match == "words" for hit in hits
        )  # each shares a word with the query or sits beside a turn that does
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert next(hit for hit in hits if hit.role == "assistant").speaker == "assistant"  # no name: the role
        # Time bounds are the conversation's time.
        early = await invoker.asearch("beagle", user="dana", before="2024-03-02T18:05:00Z")
        assert early and all(h.time < "2024-03-02T18:05:00Z" and h.by_meaning for h in early)  # the nearest, said so
        assert await invoker.asearch("beagle", user="dana", before="2024-03-02T18:05:00Z", by_meaning=False) == []
        later = await invoker.asearch("Lisbon June", user="dana", after="2024-03-02T18:01:30Z")
        assert later and all(h.time > "2024-03-02T18:01:30Z" for h in later)
        assert {h.match for h in await invoker.asearch("submarine", user="dana")} == {"meaning"}
        assert await invoker.asearch("submarine", user="dana", by_meaning=False) == []


async def test_recall_gives_hits_with_their_neighbours_in_time_order_within_the_budget(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", TRIP, user="dana")
        recall = await invoker.arecall("When do we fly to Lisbon?", user="dana", budget_tokens=400, top_k=2)
        assert isinstance(recall, Recall) and not recall.empty
        texts = [turn.text for turn in recall.turns]
        assert "June 14 to June 21, flying from Amsterdam." in texts  # the answer, beside the question it follows
        assert len(texts) == len(set(texts))
        times = [turn.time for turn in recall.turns]
        assert times == sorted(times)
        assert any(turn.hit for turn in recall.turns) and any(not turn.hit for turn in recall.turns)
        prompt = recall.as_prompt()
        assert recall.tokens == estimate_tokens(prompt) <= 400
        assert "[2024-03-02 (Sat) 18:02] Dana (user): June 14 to June 21, flying from Amsterdam." in prompt
        assert prompt.startswith("Long-term memory relevant to: When do we fly to Lisbon?")
        # A smaller budget keeps the best hit and drops the rest, never overflowing.
        small = await invoker.arecall("When do we fly to Lisbon?", user="dana", budget_tokens=60)
        assert small.turns and small.tokens <= 60 and len(small.turns) < len(recall.turns)
        assert small.as_dict()["prompt"] == small.as_prompt()


async def test_a_bounded_recall_shows_no_neighbouring_turn_from_outside_its_bounds(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", TRIP, user="dana")
        free = await invoker.arecall("Which beagle did Ana adopt?", user="dana", budget_tokens=600)
        assert "Pixel is a great name for a beagle!" in free.as_prompt()  # the turn after the hit, shown as such
        bounded = await invoker.arecall(
            "Which beagle did Ana adopt?", user="dana", budget_tokens=600, before="2024-03-02T18:06:30Z"
        )
        assert "My sister Ana adopted a beagle called Pixel." in bounded.as_prompt()
        assert "Pixel is a great name" not in bounded.as_prompt()  # said at 18:07, after the bound
        # The context document is the newest: its items dated on the bound's day or later stay out too.
        assert not bounded.notes
        assert all(turn.time < "2024-03-02T18:06:30Z" for turn in bounded.turns)
        later = await invoker.arecall(
            "Which beagle did Ana adopt?", user="dana", budget_tokens=600, after="2024-03-02T18:05:30Z"
        )
        assert all(turn.time > "2024-03-02T18:05:30Z" for turn in later.turns)  # nor before an after bound


async def test_a_recalled_turn_says_which_day_its_relative_dates_were(tmp_path: Path) -> None:
    """A reader sees a turn out of its day, asked weeks later: "yesterday" in the block carries the date it meant,
    seen from the turn's own time (a small reader answered the session's date, or the question's). The hit's text
    stays the words as said."""
    turns = [
        ("user", "I went to a pottery class yesterday and loved it.", "Dana"),
        ("assistant", "Nice! Will you go again next week?", None),
    ]
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", turns, user="dana", day="2023-07-03")
        recall = await invoker.arecall("When did I go to the pottery class?", user="dana", budget_tokens=400)
        prompt = recall.as_prompt()
        assert "Dana (user): I went to a pottery class yesterday (2023-07-02) and loved it." in prompt
        assert "Will you go again next week (week of 2023-07-10)?" in prompt  # a Monday: the week after the 3rd's
        assert recall.tokens == estimate_tokens(prompt)
        hits = await invoker.asearch("pottery class", user="dana")
        assert "I went to a pottery class yesterday and loved it." in [hit.text for hit in hits]


async def test_recall_takes_standing_facts_from_the_context_document_and_marks_gaps(tmp_path: Path) -> None:
    long_talk = (
        TRIP
        + [("user", f"Unrelated remark number {i} about the weather.", "Dana") for i in range(8)]
        + [("user", "Pixel chewed my Lisbon guidebook today.", "Dana")]
    )
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", long_talk, user="dana")
        # Three hits, so that the block's turns leave facts for the notes (a note a shown turn repeats is dropped).
        recall = await invoker.arecall(
            "What did Pixel do to the Lisbon guidebook?", user="dana", budget_tokens=800, top_k=3
        )
        prompt = recall.as_prompt()
        assert "Pixel chewed my Lisbon guidebook today." in prompt
        assert "\n...\n" in prompt  # two excerpts of the conversation, apart in time
        assert recall.notes and "Known facts (from the memory's notes):" in prompt
        assert len(recall.notes) == len(set(recall.notes))


async def test_read_side_errors_name_the_problem(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db", create_users=False) as invoker:
        await _tell(invoker, "t", TRIP)
        for query in ("", "   ", None):
            with pytest.raises(InputError, match="query is empty"):
                await invoker.asearch(query)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="at most 2000"):
            await invoker.arecall("x" * 2001)
        with pytest.raises(InputError, match="top_k must be an integer from 1 to 100"):
            await invoker.asearch("Lisbon", top_k=101)
        with pytest.raises(InputError, match="budget_tokens must be an integer from 40"):
            await invoker.arecall("Lisbon", budget_tokens=10)
        with pytest.raises(InputError, match="too small to hold one entry"):
            await invoker.arecall("Lisbon", budget_tokens=40)
        assert await invoker.asearch("Lisbon", user="zoe") == []  # no memory: nothing found, nothing created
        with pytest.raises(InputError, match="unknown user 'zoe'.*create_users=True"):  # a write is refused
            await invoker.astart_session("z", user="zoe")
        assert (await invoker.arecall("Lisbon", user="zoe@example.com")).empty  # any id names a user
        with pytest.raises(InputError, match="a NUL character"):
            await invoker.arecall("Lisbon", user="zoe\x00smith")
        with pytest.raises(InputError, match="by_meaning must be True or False, got 'no'"):
            await invoker.asearch("Lisbon", by_meaning="no")  # type: ignore[arg-type]
        with pytest.raises(InputError, match="by_meaning must be True or False"):
            await invoker.arecall("Lisbon", by_meaning=None)  # type: ignore[arg-type]
        # Issue 40 item 5: the same checks for a search and a recall, up front (a recall of an empty range gave an
        # empty block; a lone surrogate failed in the MCP client as a MemoryServerError).
        for read in (invoker.asearch, invoker.arecall):
            with pytest.raises(InputError, match="after .* must be earlier than before"):
                await read("Lisbon", after="2024-05-01T00:00:00Z", before="2024-04-01T00:00:00Z")
            with pytest.raises(InputError, match="after .* must be earlier than before"):
                await read("Lisbon", after="2024-05-01T00:00:00Z", before="2024-05-01T00:00:00Z")
            with pytest.raises(InputError, match=r"query: invalid Unicode: lone surrogate \\ud83d at character 7"):
                await read("Lisbon \ud83d")
        nearest = await invoker.arecall("submarine periscope")  # no word shared: the nearest turns, said so
        assert nearest.by_meaning_only and "No earlier turn shares a word with this" in nearest.as_prompt()
        empty = await invoker.arecall("submarine periscope", by_meaning=False)
        assert "Memory holds nothing about this yet." in empty.as_prompt() or empty.notes


async def test_users_are_isolated_and_a_thread_keeps_its_user_across_processes(tmp_path: Path) -> None:
    db, state = tmp_path / "m.db", f"sqlite:{tmp_path / 'state.db'}"
    async with build_agent(server="in-process", db=db, checkpointer=state) as invoker:
        await _tell(invoker, "alice-chat", [("user", "My cat Miso hates the vacuum cleaner.", "Alice")], user="alice")
        await _tell(invoker, "bob-chat", [("user", "My dog Rex loves the vacuum cleaner.", "Bob")], user="bob")
        await invoker.aprocess_conversation_message("user", "Default memory talk about a vacuum.", "plain")
        alice = await invoker.asearch("vacuum cleaner", user="alice")
        bob = await invoker.asearch("vacuum cleaner", user="bob")
        default = await invoker.asearch("vacuum cleaner")
        assert [h.text for h in alice] == ["My cat Miso hates the vacuum cleaner."]
        assert [h.text for h in bob] == ["My dog Rex loves the vacuum cleaner."]
        assert [h.text for h in default] == ["Default memory talk about a vacuum."]
        assert "Rex" not in (await invoker.arecall("vacuum cleaner", user="alice")).as_prompt()
        with pytest.raises(InputError, match="thread 'alice-chat' belongs to user 'alice', not 'bob'"):
            await invoker.aprocess_conversation_message("user", "misfiled?", "alice-chat", user="bob")
        with pytest.raises(InputError, match="thread 'plain' already holds 1 messages in the invoker's own memory"):
            await invoker.astart_session("plain", user="bob")
        assert (await invoker.athread_status("alice-chat")).user == "alice"
    async with build_agent(server="in-process", db=db, checkpointer=state) as resumed:
        # A new process: the thread's user comes from its checkpoint, not from the call.
        await resumed.aprocess_conversation_message("user", "Miso also hates thunderstorms.", "alice-chat")
        assert [h.text for h in await resumed.asearch("Miso", user="alice")] == [
            "Miso also hates thunderstorms.",
            "My cat Miso hates the vacuum cleaner.",
        ] or {h.text for h in await resumed.asearch("Miso", user="alice")} == {
            "Miso also hates thunderstorms.",
            "My cat Miso hates the vacuum cleaner.",
        }
        assert all(h.user == "bob" and "Miso" not in h.text for h in await resumed.asearch("Miso", user="bob"))
        assert await resumed.asearch("Miso", user="bob", by_meaning=False) == []
        with pytest.raises(InputError, match="belongs to user 'alice'"):
            await resumed.astart_session("alice-chat", user="bob")


async def test_bulk_messages_use_the_user(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db", batch_size=4) as invoker:
        await invoker.aprocess_conversation_messages(
            "t1",
            [
                {"role": "user", "content": "I run marathons.", "name": "Kim"},
                {"role": "assistant", "content": "Impressive!"},
            ],
            user="kim",
        )
        await invoker.aflush("t1")
        hits = await invoker.asearch("marathons", user="kim")
        assert hits[0].text == "I run marathons." and {h.user for h in hits} == {"kim"}
        assert await invoker.asearch("marathons") == []


def test_the_sync_twins_read_outside_an_event_loop(tmp_path: Path) -> None:
    with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        invoker.start_session("t1", "2024-01-01T10:00:00Z", user="kim")
        invoker.process_conversation_message("user", "I run marathons.", "t1", name="Kim")
        assert invoker.search("marathons", user="kim")[0].speaker == "Kim"
        assert "I run marathons." in invoker.recall("marathons", user="kim").as_prompt()


async def test_users_over_http_stay_inside_their_tokens_vault() -> None:
    acme, other, admin = "acme-token-0123456789", "other-token-0123456789", "admin-token-0123456789"
    tokens = {acme: frozenset({"acme"}), other: frozenset({"other"})}
    async with serve_http(create_server(":memory:"), token=admin, tokens=tokens) as url:
        async with build_agent(server=url, token=acme, vault="acme") as invoker:
            await _tell(invoker, "a1", [("user", "The launch code is tangerine.", "Alice")], user="alice")
            await _tell(invoker, "b1", [("user", "My locker code is plum.", "Bob")], user="bob")
            assert [h.text for h in await invoker.asearch("code", user="alice")] == ["The launch code is tangerine."]
            assert [h.text for h in await invoker.asearch("code", user="bob")] == ["My locker code is plum."]
            assert "tangerine" in (await invoker.arecall("launch code", user="alice")).as_prompt()
        async with build_agent(server=url, token=other, vault="other") as intruder:
            # The same user name in another vault is another memory: nothing of acme's alice.
            assert await intruder.asearch("code", user="alice") == []
        with pytest.raises(Exception, match="may not create vault 'acme'|limited to the vaults other"):
            async with build_agent(server=url, token=other, vault="acme"):
                pass


def _server_processes() -> list[int]:
    me, found = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")
        if parent == me and b"mycelian_agent.memory_server" in cmdline:
            found.append(int(entry.name))
    return found


def _rss_kib(pid: int | str = "self") -> int:
    return next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads process sizes from /proc")
async def test_a_thousand_users_share_one_invoker_and_one_server_process(tmp_path: Path) -> None:
    # BM25 alone: this measures what each user costs. A dense server adds a fixed ~170 MB once it has encoded a few
    # hundred entries (the model, its buffers, OpenMP's threads), reached at 250-750 users, then ~8 KB a user
    # (236 MB at 500 users, 265 MB at 4,000), which would make the growth below depend on when that happens.
    async with build_agent(
        db=tmp_path / "m.db", checkpointer=f"sqlite:{tmp_path / 'state.db'}", embeddings=False
    ) as invoker:
        sizes = {}
        for index in range(1000):
            user = f"user-{index}"
            await invoker.aprocess_conversation_message(
                "user", f"My locker number is {index} and my colour is shade{index}.", f"chat-{index}", user=user
            )
            if index in (249, 999):
                servers = _server_processes()
                assert len(servers) == 1, servers
                sizes[index] = _rss_kib() + _rss_kib(servers[0])
        for index in (0, 137, 500, 999):
            hits = await invoker.asearch(f"shade{index} colour", user=f"user-{index}")
            assert [h.user for h in hits] == [f"user-{index}"] and f"shade{index}." in hits[0].text
            assert all(f"shade{index}." in h.text for h in hits)
        assert len(invoker.reader.users) >= 1000
        growth_kib = sizes[999] - sizes[249]
        # 750 more users: a few KB each at most (ids, counters, the server's caches), never a process or a
        # connection each. Measured ~4 MB.
        assert growth_kib < 40 * 1024, f"client + server grew {growth_kib} KiB from 250 to 1,000 users"


async def test_recall_carries_the_users_standing_facts_even_when_no_word_matches(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(
            invoker,
            "bob-1",
            [
                ("user", "I'm severely allergic to peanuts.", "Bob"),
                ("assistant", "Noted, I'll keep that in mind.", None),
            ],
            user="bob",
        )
        # By meaning the allergy is the nearest turn (hybrid search, the default) ...
        nearest = await invoker.arecall("What should I cook tonight?", user="bob")
        assert nearest.by_meaning_only and "I'm severely allergic to peanuts." in nearest.as_prompt()
        # ... and the context document's standing facts carry it when only words count.
        recall = await invoker.arecall("What should I cook tonight?", user="bob", by_meaning=False)
        assert not recall.turns  # no stored turn shares a word with the question
        assert any("allergic to peanuts" in note for note in recall.notes)
        assert "Known facts (from the memory's notes):\n- Bob is severely allergic to peanuts." in recall.as_prompt()
        # A note that only repeats a turn the block shows is left out.
        shown = await invoker.arecall("peanuts allergy", user="bob")
        assert any("allergic to peanuts" in turn.text for turn in shown.turns)
        assert not any("allergic to peanuts" in note for note in shown.notes)


def test_notes_of_a_bounded_recall_leave_out_items_dated_outside_its_bounds() -> None:
    from mycelian_agent.recall.notes import select_notes, within_bounds

    document = (
        "## Facts\n- The user bought a red bicycle. (2023-05-02)\n- The user painted the bicycle blue. "
        "(2023-07-01)\n- The user is allergic to peanuts.\n- The user lives in Porto. (2023-04-01)\n"
        "- The user works as a nurse. (2023-04-01)\n- The user's sister is Ana. (2023-04-02)\n"
        "## Timeline\n- 2023-04-01: moved to Porto\n- 2023-05-02: bought a bicycle\n"
        "- 2023-07-01: painted the bicycle blue (earlier: red, 2023-05-02)\n"
    )
    matched, standing = select_notes(document, "What colour is my bicycle?", before="2023-06-02T00:00:00.000000Z")
    assert matched[0] == "The user bought a red bicycle. (2023-05-02)" and "blue" not in " ".join(matched)
    assert "The user is allergic to peanuts." in standing  # no day named: kept
    assert "blue" not in " ".join(standing)
    assert "blue" in " ".join(sum(select_notes(document, "What colour is my bicycle?"), []))  # unbounded: shown
    late = sum(select_notes(document, "What colour is my bicycle?", after="2023-06-01T00:00:00Z"), [])
    assert "The user bought a red bicycle. (2023-05-02)" not in late and any("blue" in item for item in late)
    assert within_bounds("met Ana (2024-03-02)", None, "2024-03-02T18:00:00Z") is False  # that day: cannot tell
    assert within_bounds("met Ana (2024-03-01)", None, "2024-03-02T00:00:00Z")


def test_notes_take_matching_items_then_standing_facts_never_the_unmatched_timeline() -> None:
    from mycelian_agent.placeholder import PLACEHOLDER_CONTEXT
    from mycelian_agent.recall.notes import select_notes

    document = """# Conversation context

## Facts
- Dana is severely allergic to peanuts. (2024-03-08)
- Dana's partner is Marco. (2024-03-08)

## Timeline
- 2024-03-08: Dana: We booked the Lisbon flight for June 15.
- 2024-03-09: Dana: The weather was grey.
- 2024-03-09: Dana said Marco booked the Lisbon flight for June 15.

## Open questions
- Which museum opens on Mondays?
"""
    facts = ["Dana is severely allergic to peanuts. (2024-03-08)", "Dana's partner is Marco. (2024-03-08)"]
    assert select_notes(document, "When is the Lisbon flight?") == (
        ["2024-03-08: Dana: We booked the Lisbon flight for June 15."],
        facts,
    )  # the restatement left out
    assert select_notes(document, "snacks for the party") == ([], facts)  # no timeline, no open question
    # "Dana" is in most items: it tells nothing, so it matches nothing.
    assert select_notes(document, "What did Dana say?") == ([], facts)
    assert select_notes(document, "Marco", standing_max=1) == (
        ["Dana's partner is Marco. (2024-03-08)", "2024-03-09: Dana said Marco booked the Lisbon flight for June 15."],
        ["Dana is severely allergic to peanuts. (2024-03-08)"],
    )
    assert select_notes(PLACEHOLDER_CONTEXT, "anything") == ([], [])
    # A document an LLM wrote in its own shape: its lines are items, bold headings are sections.
    assert select_notes("**Timeline**\n- went hiking\n**About the user**\n* lives in Oslo\n", "hiking") == (
        ["went hiking"],
        ["lives in Oslo"],
    )


class _UpstreamSurface:
    """A connection that offers only upstream Mycelian's parameters and records every call (our server behind)."""

    UPSTREAM = {
        "search_memories": {"memory_id", "query", "top_ke", "top_kc", "include_raw_entries"},
        "list_entries": {"vault_id", "memory_id", "limit", "before", "after"},
        "get_context": {"vault_id", "memory_id"},
        "list_memories": {"vault_id"},
        "create_memory_in_vault": {"vault_id", "title", "memory_type", "description"},
    }

    def __init__(self, inner, vault_id: str) -> None:
        self.inner, self.vault_id, self.calls = inner, vault_id, []

    def parameters(self, name: str) -> set[str]:
        return set(self.UPSTREAM.get(name, ()))

    def _check(self, name: str, arguments) -> dict:
        arguments = dict(arguments or {})
        assert name in self.UPSTREAM, f"{name} is not an upstream Mycelian tool"
        assert set(arguments) <= self.UPSTREAM[name], (name, arguments)
        self.calls.append(name)
        if name == "search_memories":  # our server wants the vault; upstream's does not take it
            arguments["vault_id"] = self.vault_id
        return arguments

    async def call(self, name: str, arguments=None) -> str:
        return await self.inner.call(name, self._check(name, arguments))

    async def call_json(self, name: str, arguments=None):
        return await self.inner.call_json(name, self._check(name, arguments))


async def test_the_reader_uses_only_upstream_mycelian_tools_and_parameters(tmp_path: Path) -> None:
    from mycelian_agent.recall import MemoryReader, UserDirectory

    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await _tell(invoker, "dana-1", TRIP, user="dana")
        vault = invoker.reader.vault_id
        upstream = _UpstreamSurface(invoker.connection, vault)
        reader = MemoryReader(
            upstream, UserDirectory(upstream, vault, create=False), default_memory_id=invoker.reader.default_memory_id
        )
        hits = await reader.asearch("Lisbon June", user="dana", before="2024-03-02T18:02:30Z")
        assert hits and all(hit.time < "2024-03-02T18:02:30Z" for hit in hits)  # bounds applied by the reader
        recall = await reader.arecall("When do we fly to Lisbon?", user="dana", budget_tokens=400)
        assert "June 14 to June 21, flying from Amsterdam." in recall.as_prompt()
        assert set(upstream.calls) == {"list_memories", "search_memories", "list_entries"}


async def test_users_and_recall_on_each_backend(memory_db: str, tmp_path: Path) -> None:
    db = memory_db if memory_db != ":memory:" else tmp_path / "m.db"
    async with build_agent(server="in-process", db=db) as invoker:
        await _tell(invoker, "dana-1", TRIP, user="dana")
        await _tell(invoker, "eve-1", [("user", "I fly to Lisbon in October.", "Eve")], user="eve")
        recall = await invoker.arecall("When do we fly to Lisbon?", user="dana", budget_tokens=400, top_k=3)
        assert "June 14 to June 21, flying from Amsterdam." in recall.as_prompt()
        assert "October" not in recall.as_prompt() and {h.user for h in recall.hits} == {"dana"}
        assert [h.text for h in await invoker.asearch("Lisbon October", user="eve")] == ["I fly to Lisbon in October."]


async def test_a_thread_checkpointed_with_another_memory_database_is_refused_naming_the_likely_cause(
    tmp_path: Path,
) -> None:
    state = f"sqlite:{tmp_path / 'state.db'}"
    async with build_agent("extractive", "in-process", db=tmp_path / "a.db", checkpointer=state) as invoker:
        await invoker.aprocess_conversation_message("user", "I like tea.", "chat", user="alice")
    async with build_agent("extractive", "in-process", db=tmp_path / "b.db", checkpointer=state) as invoker:
        with pytest.raises(InputError, match="another memory database"):
            await invoker.aprocess_conversation_message("user", "I like coffee.", "chat", user="alice")
