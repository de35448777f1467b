"""The shared limits: splitting an oversize message into parts that join back exactly, cutting tags to size."""

from __future__ import annotations

import random

import pytest

from mycelian_agent.limits import RAW_ENTRY_MAX_CHARS, TAG_KEY_MAX_CHARS, TAG_VALUE_MAX_CHARS, clip_tags, split_oversize


def test_clip_tags_cuts_keys_and_values_and_drops_none() -> None:
    tags = clip_tags({"k" * 100: "v" * 1000, 3: 4, "gone": None})
    assert tags == {"k" * TAG_KEY_MAX_CHARS: "v" * TAG_VALUE_MAX_CHARS, "3": "4"}


def _check_split(text: str, limit: int) -> list[str]:
    parts = split_oversize(text, limit)
    assert "".join(parts) == text
    assert all(0 < len(p) <= limit for p in parts)
    return parts


def test_split_short_and_empty() -> None:
    assert split_oversize("short") == ["short"]
    assert split_oversize("x" * RAW_ENTRY_MAX_CHARS) == ["x" * RAW_ENTRY_MAX_CHARS]
    assert split_oversize("") == []
    with pytest.raises(ValueError):
        split_oversize("abc", 0)


def test_split_prefers_paragraphs_then_sentences_then_spaces() -> None:
    para = "A" * 60 + ".\n\n" + "B" * 30 + ". " + "C" * 30
    assert _check_split(para, 100) == ["A" * 60 + ".\n\n", "B" * 30 + ". " + "C" * 30]
    sentences = "First sentence here. Second one follows! Third? " * 3
    parts = _check_split(sentences, 60)
    assert all(p.endswith(("! ", ". ", "? ")) for p in parts[:-1])
    words = "lorem ipsum dolor sit amet " * 20
    assert all(p.endswith(" ") for p in _check_split(words, 50)[:-1])


def test_split_hard_cut_without_boundaries() -> None:
    assert _check_split("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_split_ignores_boundaries_that_would_make_tiny_parts() -> None:
    # The only paragraph break is near the start; cutting there would waste a part.
    text = "Hi.\n\n" + "word " * 40
    parts = _check_split(text, 100)
    assert len(parts[0]) >= 50


@pytest.mark.parametrize("seed", range(30))
def test_split_properties_on_random_text(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = ["a", "b", "é", "字", " ", " ", "\n", "\n\n", ". ", "!", "\t", "🙂"]
    text = "".join(rng.choice(alphabet) * rng.randint(1, 12) for _ in range(rng.randint(0, 400)))
    limit = rng.choice([1, 2, 3, 7, 50, 200, 9000])
    _check_split(text, limit)


def test_split_realistic_long_message() -> None:
    paragraph = "The committee met on Tuesday. It approved the 2024 budget of 1.2 million euros. " * 30
    text = "\n\n".join([paragraph] * 12)
    parts = _check_split(text, RAW_ENTRY_MAX_CHARS)
    # Three paragraphs fit in a part, four do not: every cut falls between paragraphs.
    assert len(parts) == 4
    assert all(p.endswith("\n\n") for p in parts[:-1])
