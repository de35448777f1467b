"""Conversation formats: valid inputs, every kind of malformed input, the real benchmark samples, helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mycelian_agent.conversations.formats import (
    Conversation,
    iter_messages,
    load_conversations,
    parse_conversation_data,
    valid_title,
)
from mycelian_agent.errors import InputError
from mycelian_agent.limits import RAW_ENTRY_MAX_CHARS

# Evaluation-only data: read in place (never copied into the repository), skipped where absent.
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark samples not found at {DATA}")


def write(tmp_path: Path, data: object, name: str = "conv.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def load_one(tmp_path: Path, data: object) -> Conversation:
    (conversation,) = load_conversations(write(tmp_path, data))
    return conversation


def lme_record(**overrides: object) -> dict:
    record = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What is my cat called?",
        "answer": "Luna",
        "question_date": "2023/06/01 (Thu) 09:00",
        "haystack_session_ids": ["s_a", "s_b"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 14:05"],
        "haystack_sessions": [
            [{"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi! How can I help?"}],
            [
                {"role": "user", "content": "My cat is called Luna.", "has_answer": True},
                {"role": "assistant", "content": "Luna is a lovely name.", "has_answer": False},
            ],
        ],
        "answer_session_ids": ["s_b"],
    }
    record.update(overrides)
    return record


def locomo_sample(**overrides: object) -> dict:
    def turn(speaker: str, dia_id: str, text: str, **extra: object) -> dict:
        return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}

    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                turn("Ana", "D1:1", "I adopted a dog named Pixel."),
                turn(
                    "Ben",
                    "D1:2",
                    "Look at this!",
                    img_url=["http://x/y.jpg"],
                    blip_caption="a photo of a red bike",
                    query="red bike",
                ),
            ],
            "session_2_date_time": "12:05 am on 2 June, 2023",
            "session_2": [turn("Ben", "D2:1", "How is Pixel?"), turn("Ana", "D2:2", "Great, thanks.")],
            "session_10_date_time": "9:00 am on 1 July, 2023",
            "session_10": [turn("Ana", "D10:1", "Pixel learned to sit.")],
            # A date without a session occurs upstream; it must not create a session.
            "session_11_date_time": "9:00 am on 2 July, 2023",
        },
        "qa": [
            {"question": "What is the dog's name?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "How many dogs?", "answer": 1, "evidence": ["D1:1; D2:2", "D1:1"], "category": 1},
            {
                "question": "What is Ben's cat called?",
                "adversarial_answer": "Not mentioned",
                "evidence": [],
                "category": 5,
            },
        ],
        "observation": {"session_1_observation": "OBSERVATION TEXT"},
        "session_summary": {"session_1_summary": "SUMMARY TEXT"},
        "event_summary": {"events_session_1": "EVENT TEXT"},
    }
    sample.update(overrides)
    return sample


# ------------------------------------------------------------------------------------------------ valid inputs


def test_messages_format(tmp_path: Path) -> None:
    conv = load_one(
        tmp_path,
        {
            "conversation_time": "2024-03-02T19:40:00+01:00",
            "messages": [
                {"role": "user", "content": "I live in Utrecht.", "tags": {"topic": "home"}},
                {"role": "assistant", "content": "Noted."},
                {"role": "human", "content": "Mapped to user."},
                {"role": "ai", "content": "Mapped to assistant."},
            ],
        },
    )
    assert conv.kind == "messages"
    assert conv.conversation_id == "conv"  # the file stem
    assert conv.source == str(tmp_path / "conv.json")
    (session,) = conv.sessions
    assert session.session_id == "session_1"
    assert session.conversation_time == "2024-03-02T18:40:00Z"
    assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]
    assert session.messages[0].tags == {"topic": "home", "session_id": "session_1", "turn": "0"}
    assert session.messages[3].tags == {"session_id": "session_1", "turn": "3"}
    assert conv.questions == ()


def test_sessions_format(tmp_path: Path) -> None:
    conv = load_one(
        tmp_path,
        {
            "conversation_id": "trip",
            "sessions": [
                {
                    "session_id": "a",
                    "conversation_time": "2024-03-02T18:40:00Z",
                    "messages": [{"role": "user", "content": "One."}, {"role": "assistant", "content": "Two."}],
                },
                {"session_id": "b", "messages": [{"role": "user", "content": "Three."}]},
            ],
        },
    )
    assert (conv.conversation_id, conv.kind, conv.message_count) == ("trip", "sessions", 3)
    assert [(s.session_id, s.conversation_time) for s in conv.sessions] == [("a", "2024-03-02T18:40:00Z"), ("b", None)]
    assert conv.sessions[1].messages[0].tags == {"session_id": "b", "turn": "0"}
    positions = [
        (p.session_index, p.message_index, p.session.session_id, p.message.content) for p in iter_messages(conv)
    ]
    assert positions == [(0, 0, "a", "One."), (0, 1, "a", "Two."), (1, 0, "b", "Three.")]


def test_array_of_generic_conversations_gets_numbered_ids(tmp_path: Path) -> None:
    one = {"messages": [{"role": "user", "content": "x"}]}
    convs = load_conversations(write(tmp_path, [one, one, {**one, "conversation_id": "named"}], "chats.json"))
    assert [c.conversation_id for c in convs] == ["chats-1", "chats-2", "named"]


def test_parse_conversation_data_in_memory() -> None:
    (conv,) = parse_conversation_data({"messages": [{"role": "user", "content": "hi"}]})
    assert (conv.conversation_id, conv.source) == ("conversation", "<memory>")
    with pytest.raises(InputError, match=r"^<memory>: messages\[0\]\.role: unknown role"):
        parse_conversation_data({"messages": [{"role": "bot", "content": "hi"}]})


def test_longmemeval_record(tmp_path: Path) -> None:
    conv = load_one(tmp_path, lme_record(answer=3))
    assert (conv.conversation_id, conv.kind) == ("q1", "longmemeval")
    assert [(s.session_id, s.conversation_time) for s in conv.sessions] == [
        ("s_a", "2023-05-20T02:21:00Z"),
        ("s_b", "2023-05-21T14:05:00Z"),
    ]
    assert conv.sessions[1].messages[0].tags == {"session_id": "s_b", "turn": "0", "has_answer": "true"}
    assert conv.sessions[1].messages[1].tags == {"session_id": "s_b", "turn": "1"}  # has_answer false: no tag
    (q,) = conv.questions
    assert (q.question_id, q.category, q.answer, q.question_date) == (
        "q1",
        "single-session-user",
        "3",
        "2023-06-01T09:00:00Z",
    )
    assert q.evidence == ("s_b",)
    assert q.evidence_turns == ("s_b:0",)
    assert not q.is_abstention


def test_longmemeval_list_null_question_date_and_abstention(tmp_path: Path) -> None:
    convs = load_conversations(
        write(tmp_path, [lme_record(), lme_record(question_id="q2_abs", question_date=None, answer_session_ids=[])])
    )
    assert [c.conversation_id for c in convs] == ["q1", "q2_abs"]
    q2 = convs[1].questions[0]
    assert q2.question_date is None and q2.evidence == () and q2.is_abstention


def test_locomo_sample(tmp_path: Path) -> None:
    conv = load_one(tmp_path, locomo_sample())
    assert (conv.conversation_id, conv.kind) == ("conv-x", "locomo")
    assert [s.session_id for s in conv.sessions] == ["session_1", "session_2", "session_10"]  # numeric order
    assert [s.conversation_time for s in conv.sessions] == [
        "2023-05-08T13:56:00Z",
        "2023-06-02T00:05:00Z",
        "2023-07-01T09:00:00Z",
    ]
    first, photo = conv.sessions[0].messages
    assert (first.role, photo.role) == ("user", "assistant")
    assert first.tags == {"session_id": "session_1", "turn": "0", "dia_id": "D1:1", "speaker": "Ana"}
    assert photo.content == "Look at this! [shares a photo: a photo of a red bike]"
    everything = " ".join(p.message.content for p in iter_messages(conv))
    assert not re.search('OBSERVATION|SUMMARY|EVENT|red bike"|http', everything)
    q1, q2, q3 = conv.questions
    assert (q1.question_id, q1.category, q1.evidence, q1.question_date) == ("conv-x:0", "4", ("D1:1",), None)
    assert (q2.answer, q2.evidence) == ("1", ("D1:1", "D2:2"))  # split "a; b", duplicates once
    assert (q3.answer, q3.category, q3.is_abstention) == ("Not mentioned", "5", True)


def test_locomo_malformed_evidence_ids_are_normalised_and_unknown_ones_kept(tmp_path: Path) -> None:
    sample = locomo_sample()
    sample["qa"] = [{"question": "q", "answer": "a", "category": 4, "evidence": ["D2:02", "D:10:1; d1:1", "D7"]}]
    (question,) = load_one(tmp_path, sample).questions
    # "D7" names no turn: kept as given, so the runners report it as missing instead of silently dropping it.
    assert question.evidence == ("D2:2", "D10:1", "D1:1", "D7")


def test_locomo_photo_only_turn(tmp_path: Path) -> None:
    sample = locomo_sample()
    sample["conversation"]["session_2"][0] = {"speaker": "Ben", "dia_id": "D2:1", "text": "", "blip_caption": "a cat"}
    assert load_one(tmp_path, sample).sessions[1].messages[0].content == "[shares a photo: a cat]"


def test_quickstart_example_loads() -> None:
    (conv,) = load_conversations(Path(__file__).resolve().parents[1] / "examples" / "quickstart_conversation.json")
    assert len(conv.sessions) == 2 and conv.message_count == 16
    assert all(s.conversation_time for s in conv.sessions)


# -------------------------------------------------------------------------------------------- malformed inputs

GOOD_MSG = {"role": "user", "content": "hi"}


def _sessions(*messages: object) -> dict:
    return {"sessions": [{"session_id": "a", "messages": [GOOD_MSG]}, {"session_id": "b", "messages": list(messages)}]}


def _locomo_turn(**turn: object) -> dict:
    sample = locomo_sample()
    sample["conversation"]["session_2"][1] = {"speaker": "Ana", "dia_id": "D2:2", "text": "ok", **turn}
    return sample


def _locomo_conv(**changes: object) -> dict:
    sample = locomo_sample()
    sample["conversation"].update(changes)
    sample["conversation"] = {k: v for k, v in sample["conversation"].items() if v is not None}
    return sample


BAD_HAYSTACK = lme_record()
BAD_HAYSTACK["haystack_sessions"][1][1] = {"role": "system", "content": "x"}

MALFORMED = {
    "unknown format": ({"turns": []}, "top level", "unknown format (keys: 'turns'); accepted: 'messages'"),
    "not an object": ("hello", "top level", "expected a conversation object, got a string"),
    "empty array": ([], "top level", "empty array"),
    "array item": ([{"messages": [GOOD_MSG]}, 3], "[1]", "expected a conversation object, got a number"),
    "both keys": ({"messages": [], "sessions": []}, "top level", "both 'messages' and 'sessions'"),
    "unknown role": (
        _sessions(GOOD_MSG, {"role": "bot", "content": "x"}),
        "sessions[1].messages[1].role",
        "unknown role 'bot' (accepted: user, assistant; also human → user, ai → assistant)",
    ),
    "role case": ({"messages": [{"role": "User", "content": "x"}]}, "messages[0].role", "unknown role 'User'"),
    "empty content": (
        _sessions({"role": "user", "content": ""}),
        "sessions[1].messages[0].content",
        "content is empty or whitespace only",
    ),
    "blank content": (
        _sessions({"role": "user", "content": " \n\t"}),
        "sessions[1].messages[0].content",
        "content is empty or whitespace only",
    ),
    "non-string content": (
        _sessions({"role": "user", "content": ["x"]}),
        "sessions[1].messages[0].content",
        "must be a string, got an array",
    ),
    "null content": (
        _sessions({"role": "user", "content": None}),
        "sessions[1].messages[0].content",
        "must be a string, got null",
    ),
    "missing content": (_sessions({"role": "user"}), "sessions[1].messages[0].content", "missing (required key)"),
    "missing role": ({"messages": [{"content": "x"}]}, "messages[0].role", "missing (required key)"),
    "message not object": ({"messages": ["hi"]}, "messages[0]", "must be an object, got a string"),
    "unknown message key": (
        {"messages": [{**GOOD_MSG, "timestamp": "x"}]},
        "messages[0].timestamp",
        "unknown key (accepted: role, content, name, tags)",
    ),
    "unknown top key": ({"messages": [GOOD_MSG], "title": "x"}, "title", "unknown key"),
    "reserved tag": ({"messages": [{**GOOD_MSG, "tags": {"turn": "1"}}]}, "messages[0].tags.turn", "reserved tag name"),
    "tag value": (
        {"messages": [{**GOOD_MSG, "tags": {"n": 1}}]},
        "messages[0].tags.n",
        "must be a string, got a number",
    ),
    "tags not object": (
        {"messages": [{**GOOD_MSG, "tags": ["a"]}]},
        "messages[0].tags",
        "must be an object, got an array",
    ),
    "no messages": ({"messages": []}, "messages", "must hold at least one message"),
    "messages not list": ({"messages": "hi"}, "messages", "must be an array, got a string"),
    "no sessions": ({"sessions": []}, "sessions", "must hold at least one session"),
    "missing session_id": (
        {"sessions": [{"messages": [GOOD_MSG]}]},
        "sessions[0].session_id",
        "missing (required key)",
    ),
    "empty session_id": (
        {"sessions": [{"session_id": " ", "messages": [GOOD_MSG]}]},
        "sessions[0].session_id",
        "must not be empty",
    ),
    "duplicate session_id": (
        {"sessions": [{"session_id": "a", "messages": [GOOD_MSG]}, {"session_id": "a", "messages": [GOOD_MSG]}]},
        "sessions[1].session_id",
        "duplicate session id 'a'",
    ),
    "bad conversation_time": (
        {"messages": [GOOD_MSG], "conversation_time": "yesterday"},
        "conversation_time",
        "unparseable date 'yesterday'",
    ),
    "bad session time": (
        {"sessions": [{"session_id": "a", "conversation_time": "2023-13-01", "messages": [GOOD_MSG]}]},
        "sessions[0].conversation_time",
        "unparseable date '2023-13-01'",
    ),
    "duplicate conversation ids": (
        [{"conversation_id": "c", "messages": [GOOD_MSG]}] * 2,
        "[1]",
        "duplicate conversation id 'c'",
    ),
    "lme lengths": (
        lme_record(haystack_dates=["2023/05/20 (Sat) 02:21"]),
        "top level",
        "haystack lists differ in length: haystack_sessions 2, haystack_session_ids 2, haystack_dates 1",
    ),
    "lme role": ([BAD_HAYSTACK], "[0].haystack_sessions[1][1].role", "unknown role 'system'"),
    "lme date": (
        lme_record(haystack_dates=["2023/05/20 (Sat) 02:21", "2023/05/32 (Sat) 02:21"]),
        "haystack_dates[1]",
        "unparseable date '2023/05/32 (Sat) 02:21'",
    ),
    "lme null date": (
        lme_record(haystack_dates=["2023/05/20 (Sat) 02:21", None]),
        "haystack_dates[1]",
        "must be a string, got null",
    ),
    "lme question date": (lme_record(question_date="soon"), "question_date", "unparseable date 'soon'"),
    "lme session not list": (
        lme_record(haystack_sessions=[[], {"role": "user"}]),
        "haystack_sessions[1]",
        "must be an array, got an object",
    ),
    "lme has_answer": (
        lme_record(haystack_sessions=[[], [{**GOOD_MSG, "has_answer": "yes"}]]),
        "haystack_sessions[1][0].has_answer",
        "must be true or false, got a string",
    ),
    "lme missing answer ids": (
        {k: v for k, v in lme_record().items() if k != "answer_session_ids"},
        "answer_session_ids",
        "missing (required key)",
    ),
    "lme answer type": (lme_record(answer=None), "answer", "must be a string or a number, got null"),
    "lme duplicate session": (
        lme_record(haystack_session_ids=["s", "s"]),
        "haystack_session_ids[1]",
        "duplicate session id 's'",
    ),
    "locomo speaker": (
        _locomo_turn(speaker="Cy"),
        "conversation.session_2[1].speaker",
        "unknown speaker 'Cy' (expected 'Ana' or 'Ben')",
    ),
    "locomo empty text": (
        _locomo_turn(text="  "),
        "conversation.session_2[1].text",
        "content is empty or whitespace only",
    ),
    "locomo missing dia_id": (
        _locomo_turn(dia_id=None),
        "conversation.session_2[1].dia_id",
        "must be a string, got null",
    ),
    "locomo missing date": (
        _locomo_conv(session_2_date_time=None),
        "conversation.session_2_date_time",
        "missing (required key: the session's date)",
    ),
    "locomo bad date": (
        _locomo_conv(session_2_date_time="13:05 pm on 2 June, 2023"),
        "conversation.session_2_date_time",
        "unparseable date '13:05 pm on 2 June, 2023'",
    ),
    "locomo no speaker_b": (_locomo_conv(speaker_b=None), "conversation.speaker_b", "missing (required key)"),
    "locomo same speakers": (_locomo_conv(speaker_b="Ana"), "conversation.speaker_b", "same name as speaker_a"),
    "locomo no sessions": (
        {"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B"}},
        "conversation",
        "no session_<N> keys",
    ),
    "locomo no answer": (
        locomo_sample(qa=[{"question": "q", "evidence": [], "category": 5}]),
        "qa[0].answer",
        "missing (required key; 'adversarial_answer' also accepted)",
    ),
    "locomo category": (
        locomo_sample(qa=[{"question": "q", "answer": "a", "evidence": [], "category": "4"}]),
        "qa[0].category",
        "must be an integer, got a string",
    ),
    "locomo evidence": (
        locomo_sample(qa=[{"question": "q", "answer": "a", "evidence": [1], "category": 4}]),
        "qa[0].evidence[0]",
        "must be a string, got a number",
    ),
}


@pytest.mark.parametrize(("data", "position", "problem"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_input_names_file_position_and_problem(
    tmp_path: Path, data: object, position: str, problem: str
) -> None:
    path = write(tmp_path, data, "bad.json")
    with pytest.raises(InputError) as info:
        load_conversations(path)
    assert str(info.value).startswith(f"{path}: {position}: "), str(info.value)
    assert problem in str(info.value)


@pytest.mark.parametrize(
    ("text", "where"),
    [('{"messages": [', "line 1 column 15"), ('{\n  "messages": [\n    {"role": "user",}\n]}', "line 3 column 21")],
)
def test_malformed_json_gives_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(f"{path}: {where}: malformed JSON: ")):
        load_conversations(path)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.json: cannot read file"):
        load_conversations(tmp_path / "missing.json")
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"messages": [{"role": "user", "content": "caf\xe9"}]}'.encode("latin-1"))
    with pytest.raises(InputError, match=r"latin\.json: not UTF-8"):
        load_conversations(latin)


def test_oversize_message_is_not_an_error(tmp_path: Path) -> None:
    conv = load_one(tmp_path, {"messages": [{"role": "user", "content": "x" * (RAW_ENTRY_MAX_CHARS * 2)}]})
    assert len(conv.sessions[0].messages[0].content) == 2 * RAW_ENTRY_MAX_CHARS


# ------------------------------------------------------------------------------------------------- real data


@needs_data
def test_longmemeval_s_sample() -> None:
    (conv,) = load_conversations(DATA / "longmemeval" / "longmemeval_s_1q.json")
    assert (conv.conversation_id, len(conv.sessions), conv.message_count) == ("852ce960", 39, 396)
    (q,) = conv.questions
    assert q.category == "knowledge-update" and q.question_date == "2023-12-18T04:17:00Z"
    assert q.evidence == ("answer_3a6f1e82_1", "answer_3a6f1e82_2")
    flagged = [
        f"{p.session.session_id}:{p.message_index}" for p in iter_messages(conv) if "has_answer" in p.message.tags
    ]
    assert flagged and tuple(flagged) == q.evidence_turns
    assert {t.split(":")[0] for t in q.evidence_turns} <= set(q.evidence)
    assert all(s.conversation_time and s.conversation_time.endswith("Z") for s in conv.sessions)


@needs_data
def test_longmemeval_oracle_sample() -> None:
    convs = load_conversations(DATA / "longmemeval" / "longmemeval_oracle_6q.json")
    assert len(convs) == 6
    assert len({c.questions[0].category for c in convs}) == 6
    assert any(c.questions[0].question_date is None for c in convs)
    assert all(c.questions[0].evidence_turns == () for c in convs)  # has_answer flags are lost in this file


@needs_data
def test_longmemeval_abstention_sample() -> None:
    convs = load_conversations(DATA / "longmemeval" / "longmemeval_s_abstention_2q.json")
    assert [c.conversation_id for c in convs] == ["0862e8bf_abs", "15745da0_abs"]
    assert all(c.questions[0].is_abstention and c.questions[0].evidence == () for c in convs)


@needs_data
def test_locomo_dev3() -> None:
    convs = load_conversations(DATA / "locomo" / "locomo_dev3.json")
    counts = {c.conversation_id: (len(c.sessions), c.message_count, len(c.questions)) for c in convs}
    assert counts == {"conv-26": (19, 419, 199), "conv-30": (19, 369, 105), "conv-41": (32, 663, 193)}
    conv26 = convs[0]
    assert conv26.sessions[0].conversation_time == "2023-05-08T13:56:00Z"
    assert {m.message.role for m in iter_messages(conv26)} == {"user", "assistant"}
    dia_ids = {p.message.tags["dia_id"] for p in iter_messages(conv26)}
    assert len(dia_ids) == 419
    assert all(re.fullmatch(r"D\d+:\d+", e) for c in convs for q in c.questions for e in q.evidence)
    by_category: dict[str, int] = {}
    for q in conv26.questions:
        by_category[q.category] = by_category.get(q.category, 0) + 1
    assert by_category == {"1": 32, "2": 37, "3": 13, "4": 70, "5": 47}


# ------------------------------------------------------------------------------------------------ valid_title

TITLE = re.compile(r"[A-Za-z0-9-]{1,50}")


@pytest.mark.parametrize("text", ["conv-26", "852ce960", "A", "x" * 50, "quickstart-lisbon-trip"])
def test_valid_title_keeps_valid_ids(text: str) -> None:
    assert valid_title(text) == text


@pytest.mark.parametrize(
    "text", ["gpt4_2c50253f", "0862e8bf_abs", "conv 26", "", "   ", "x" * 51, "ünïcødé", "a/b/c", "-" * 60, "🙂"]
)
def test_valid_title_fixes_invalid_ids(text: str) -> None:
    title = valid_title(text)
    assert TITLE.fullmatch(title), title
    assert title == valid_title(text)  # deterministic
    assert title != text


def test_valid_title_examples_and_uniqueness() -> None:
    assert valid_title("gpt4_2c50253f").startswith("gpt4-2c50253f-")
    assert valid_title("a_b") != valid_title("a.b")  # same sanitised form, different hashes
    assert valid_title("x" * 60) != valid_title("x" * 61)
    assert len(valid_title("y" * 500)) == 50


def test_benchmark_sessions_may_be_empty(tmp_path: Path) -> None:
    conv = load_one(tmp_path, lme_record(haystack_sessions=[[], [{"role": "user", "content": "x"}]]))
    assert [len(s.messages) for s in conv.sessions] == [0, 1]
    assert conv.sessions[0].conversation_time == "2023-05-20T02:21:00Z"
