"""Dataset loaders: every supported format, on small fixtures and on the real benchmark data."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.evaluation.datasets import DatasetError, load_dataset

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def titles(dataset, ids):
    by_id = {p.id: p.title for p in dataset.passages}
    return [by_id[i] for i in ids]


def test_hotpotqa_official_format():
    ds = load_dataset(FIXTURES / "hotpot_official.json")
    assert [p.title for p in ds.passages] == ["Vienna", "Danube", "Rhine"]  # pooled: no repeats
    assert ds.passages[0].text == "Vienna is the capital of Austria. It lies on the Danube."
    q1, q2 = ds.questions
    assert (q1.answers, q1.kind, titles(ds, q1.gold)) == (
        ["Danube"],
        "bridge",
        ["Vienna", "Danube"],
    )
    assert (q2.kind, titles(ds, q2.gold)) == ("comparison", ["Rhine", "Danube"])


def test_ircot_format():
    ds = load_dataset(FIXTURES / "ircot.jsonl")
    (q,) = ds.questions
    assert q.answers == ["Ada Lind"]
    assert titles(ds, q.gold) == ["Ridgeline", "Northfold"]
    assert q.kind == "bridge"
    assert len(ds.passages) == 3


def test_musique_gold_in_hop_order_with_the_companion_corpus():
    ds = load_dataset(FIXTURES / "musique.json", FIXTURES / "musique_corpus.json")
    (q,) = ds.questions
    assert titles(ds, q.gold) == ["Northfold", "Ada Lind"]
    assert q.answers == ["Bergen", "Bergen, Norway"]
    assert q.kind == "2hop"
    # the corpus's Oslo passage and the question's are the same passage (title and text)
    assert [p.title for p in ds.passages] == ["Oslo", "Trondheim", "Northfold", "Ada Lind"]


def test_beir_gold_pool_finds_its_qrels_file_and_drops_unknown_docs():
    ds = load_dataset(FIXTURES / "beir_pool.json")
    assert [(q.id, titles(ds, q.gold)) for q in ds.questions] == [
        ("b1", ["Storm tents"]),
        ("b2", ["Winter stoves"]),  # d9 is not in the pool
    ]
    assert all(q.kind == "single-hop" for q in ds.questions)


def test_beir_folder():
    ds = load_dataset(FIXTURES / "beir_folder")
    assert [(q.question, titles(ds, q.gold)) for q in ds.questions] == [
        ("storm tents", ["Storm tents"]),
        ("winter stove", [""]),
    ]


def test_simple_jsonl_with_a_corpus():
    ds = load_dataset(FIXTURES / "simple.jsonl", FIXTURES / "simple_corpus.jsonl")
    assert titles(ds, ds.questions[0].gold) == ["Northfold"]
    with pytest.raises(DatasetError, match="needs corpus"):
        load_dataset(FIXTURES / "simple.jsonl")


def test_errors_are_clear(tmp_path):
    with pytest.raises(DatasetError, match="no dataset at"):
        load_dataset(tmp_path / "missing.json")
    (tmp_path / "odd.json").write_text('[{"foo": 1}]')
    with pytest.raises(DatasetError, match="unrecognised format"):
        load_dataset(tmp_path / "odd.json")
    (tmp_path / "bad.json").write_text("{{{")
    with pytest.raises(DatasetError, match="not JSON"):
        load_dataset(tmp_path / "bad.json")
    (tmp_path / "broken.jsonl").write_text('{"question_text": "q", "contexts": [{"title": "t"}]}\n')
    with pytest.raises(DatasetError, match="malformed field"):
        load_dataset(tmp_path / "broken.jsonl")


def test_sample_keeps_the_whole_pool():
    ds = load_dataset(FIXTURES / "hotpot_official.json")
    small = ds.sample(1)
    assert len(small.questions) == 1
    assert small.passages == ds.passages


@pytest.mark.skipif(not DATA.exists(), reason="benchmark data not present")
def test_the_real_benchmark_data_loads_with_the_documented_counts():
    hotpot = load_dataset(DATA / "hotpotqa_ircot500" / "hotpotqa_dev500_ircot.jsonl")
    assert (len(hotpot.questions), len(hotpot.passages)) == (500, 4858)
    assert all(len(q.gold) == 2 for q in hotpot.questions)
    assert sum(q.kind == "comparison" for q in hotpot.questions) == 80
    musique = load_dataset(DATA / "musique_hipporag100" / "musique_train100.json")
    assert (len(musique.questions), len(musique.passages)) == (100, 1890)
    assert sorted({len(q.gold) for q in musique.questions}) == [2, 3, 4]
    scifact = load_dataset(DATA / "beir_gold_pools" / "beir_scifact_test.json")
    assert len(scifact.passages) == 283
    assert len(scifact.questions) == 300
