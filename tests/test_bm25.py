"""bm25.py and porter.py: Python sees FTS5's stems, and the IDF never reaches zero."""

from __future__ import annotations

import sqlite3

from mycelian_agent.memory_server.retrieval import bm25, search
from mycelian_agent.memory_server.text.porter import stem

_WORDS = (
    "caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated troubled sized hopping "
    "tanned falling hissing fizzed failing filing happy sky relational conditional rational valenci hesitanci "
    "digitizer conformabli radicalli differentli vileli analogousli vietnamization predication operator feudalism "
    "decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate formative formalize "
    "electriciti electrical hopeful goodness revival allowance inference airliner gyroscopic adjustable defensible "
    "irritant replacement adjustment dependent adoption homologou communism activate angulariti homologous "
    "effective bowdlerize probate rate cease controll roll generalization oscillators skies dying news innings "
    "marathons running painting paints k9aholics u2019s 10th 1990s mornings volunteered volunteering lgbtq "
    "straße naïveties cafés münchen résumés"
).split()


def test_the_stems_are_fts5s() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", list(enumerate(_WORDS, 1)))
    indexed = {doc: term for term, doc in conn.execute("SELECT term, doc FROM v")}
    assert [indexed[i] for i in range(1, len(_WORDS) + 1)] == [bm25.tokens(w)[0] for w in _WORDS]
    assert stem("running") == "run" and bm25.tokens("Cafés, RUNNING!") == ["cafe", "run"]


def test_the_idf_never_reaches_zero() -> None:
    assert bm25.idf(16, 16) > 0 and bm25.idf(16, 8) > bm25.idf(16, 12) > bm25.idf(16, 16)
    assert abs(bm25.idf(100, 50) - 0.693) < 0.01  # ln 2 for a term in half the entries


def test_weighted_fields_and_the_thread_tag() -> None:
    terms = bm25.entry_terms(
        "We ran", "On 2024-05-03 Ana said: we ran", {"speaker": "Ana", "thread": "run-club"}, "2024-05-03T10:00:00Z"
    )
    # raw 1 + summary 1.5 for "ran"; the thread tag names the conversation and is not scored; the date weighs 0.5.
    assert (
        terms.frequencies["ran"] == 2.5 and "club" not in terms.frequencies and terms.frequencies["mai"] == 0.5
    )  # "May", stemmed
    ranked = bm25.rank([(1, terms)], ["ran"], 10, {"ran": 1}, 100)
    assert ranked[0][0] == 1 and 1.0 < ranked[0][1] < 10.0


def test_a_search_tokenises_no_entry_the_store_wrote(tmp_path, monkeypatch) -> None:
    # A write tokenises its entry for the term statistics (term_stats.py) and puts its terms in the store's entry
    # cache once committed, so a search never tokenises a candidate written through this store.
    from mycelian_agent.memory_server.storage.sqlite.store import Store
    from mycelian_agent.memory_server.text import analysis

    store = Store.open(tmp_path / "m.db")
    try:
        vault = store.create_vault("v")["vaultId"]
        memory = store.create_memory(vault, "m", "CHAT")["memoryId"]
        seen: list[str] = []
        original = analysis.entry_terms
        monkeypatch.setattr(
            analysis, "entry_terms", lambda raw, *rest, **options: seen.append(raw) or original(raw, *rest, **options)
        )
        for i in range(6):
            store.add_entry(vault, memory, raw_entry=f"We ran {i} miles by the river", summary=f"Ana ran {i} miles")
        assert len(seen) == 6  # once each, by the write
        first = search(store, memory, "river miles", top_ke=5)
        assert first["count"] == 5 and len(seen) == 6
        store.add_entry(vault, memory, raw_entry="A new river walk", summary="Ana walked by the river")
        assert search(store, memory, "river walk", top_ke=5)["entries"][0]["summary"] == "Ana walked by the river"
        assert seen[6:] == ["A new river walk"]
    finally:
        store.close()


def test_a_stem_the_query_holds_twice_weighs_twice() -> None:
    # "dogs" and "dog" are two query words of one stem: like FTS5 (which sums each phrase) and Lucene, BM25 weighs
    # the stem once per query word.
    assert bm25.query_stems(["dogs", "maria", "dog"]) == ["dog", "maria", "dog"]
    terms = bm25.entry_terms("a white dog", "", {}, None)
    once = bm25.rank([(1, terms)], ["dog"], 10, {"dog": 2}, 30)[0][1]
    twice = bm25.rank([(1, terms)], ["dog", "dog"], 10, {"dog": 2}, 30)[0][1]
    assert abs(twice - 2 * once) < 1e-9
