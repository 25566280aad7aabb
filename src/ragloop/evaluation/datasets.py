"""Evaluation datasets: questions with gold passages and answers, over a pooled corpus.

Loaders for the formats users have (:func:`load_dataset` detects which):

- HotpotQA's official JSON (``context`` as ``[title, sentences]``, ``supporting_facts``);
- the IRCoT JSON Lines format (``question_text``, ``contexts`` with ``is_supporting``);
- MuSiQue (official JSON Lines, or HippoRAG's JSON list plus its corpus file), gold passages in
  hop order from ``question_decomposition``;
- BEIR (a folder with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/*.tsv``, or HippoRAG's
  gold-pool JSON plus its ``*_qrel.json``);
- a simple JSON Lines file of ``question``, ``answers`` and ``gold`` passage ids, with a corpus
  JSON Lines file of ``id``, ``title``, ``text``.

Passages are pooled: deduplicated by title and text, each with a stable opaque id (``p0``,
``p1``, ...). Gold fields are only ever read by the metrics, never at query time.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ragloop.core.errors import DatasetError as DatasetError


class EvalPassage(BaseModel):
    id: str
    title: str
    text: str


class EvalQuestion(BaseModel):
    """A question, its acceptable answers and its gold passage ids (in hop order when known).
    ``kind`` is the question type when the dataset says or implies it (``comparison``,
    ``bridge``, ``2hop``, ...). ``answerable`` is False for a question the documents do not
    answer (no gold passage, no gold answer: any answer to it is wrong, a refusal right)."""

    id: str
    question: str
    answers: list[str] = Field(default_factory=list)
    gold: list[str]
    kind: str | None = None
    answerable: bool = True


class EvalDataset(BaseModel):
    name: str
    questions: list[EvalQuestion]
    passages: list[EvalPassage]

    def sample(self, limit: int | None) -> EvalDataset:
        """The first ``limit`` questions (with the whole pool, so the task stays as hard)."""
        if limit is None or limit >= len(self.questions):
            return self
        return self.model_copy(update={"questions": self.questions[:limit]})


class Pool:
    """Passages deduplicated by (title, text), with stable ids in first-seen order."""

    def __init__(self) -> None:
        self.passages: list[EvalPassage] = []
        self._ids: dict[tuple[str, str], str] = {}
        self._by_title: dict[str, list[str]] = {}

    def add(self, title: str, text: str) -> str:
        key = (title.strip(), " ".join(text.split()))
        if key not in self._ids:
            passage_id = f"p{len(self.passages)}"
            self._ids[key] = passage_id
            self.passages.append(EvalPassage(id=passage_id, title=key[0], text=text.strip()))
            self._by_title.setdefault(key[0], []).append(passage_id)
        return self._ids[key]

    def by_title(self, title: str) -> list[str]:
        return self._by_title.get(title.strip(), [])


def _yes_no_kind(answers: list[str]) -> str | None:
    # HotpotQA's comparison questions are the ones answered yes or no (an approximation the
    # IRCoT file needs, since it drops the official `type`)
    return "comparison" if answers and answers[0].lower() in ("yes", "no") else "bridge"


def _read_json_or_lines(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".jsonl":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # maybe JSON Lines under another name
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: not JSON or JSON Lines ({error})") from None


def load_hotpotqa(rows: Iterable[dict[str, Any]], name: str = "hotpotqa") -> EvalDataset:
    """HotpotQA's official format."""
    pool = Pool()
    questions = []
    for row in rows:
        titles = {}
        for title, sentences in row["context"]:
            titles[title] = pool.add(title, "".join(sentences))
        gold = list(dict.fromkeys(titles[t] for t, _ in row["supporting_facts"] if t in titles))
        answers = [row["answer"]] if row.get("answer") else []
        kind = row.get("type") or _yes_no_kind(answers)
        questions.append(
            EvalQuestion(
                id=row["_id"], question=row["question"], answers=answers, gold=gold, kind=kind
            )
        )
    return EvalDataset(name=name, questions=questions, passages=pool.passages)


def load_ircot(rows: Iterable[dict[str, Any]], name: str = "ircot") -> EvalDataset:
    """The IRCoT JSON Lines format (``question_text``, ``answers_objects``, ``contexts``)."""
    pool = Pool()
    questions = []
    for row in rows:
        gold = []
        for context in row["contexts"]:
            passage_id = pool.add(context["title"], context["paragraph_text"])
            if context.get("is_supporting"):
                gold.append(passage_id)
        answers = [s for a in row.get("answers_objects", []) for s in a.get("spans", [])]
        questions.append(
            EvalQuestion(
                id=str(row["question_id"]),
                question=row["question_text"],
                answers=answers,
                gold=gold,
                kind=_yes_no_kind(answers),
            )
        )
    return EvalDataset(name=name, questions=questions, passages=pool.passages)


def load_musique(
    rows: Iterable[dict[str, Any]], corpus: Iterable[dict[str, Any]] = (), name: str = "musique"
) -> EvalDataset:
    """MuSiQue: gold passages in the order of the question's decomposition (hop order)."""
    pool = Pool()
    for passage in corpus:
        pool.add(passage["title"], passage["text"])
    questions = []
    for row in rows:
        ids = {p["idx"]: pool.add(p["title"], p["paragraph_text"]) for p in row["paragraphs"]}
        hops = [
            ids[step["paragraph_support_idx"]]
            for step in row.get("question_decomposition", [])
            if step.get("paragraph_support_idx") in ids
        ]
        supporting = [ids[p["idx"]] for p in row["paragraphs"] if p.get("is_supporting")]
        gold = list(dict.fromkeys(hops + supporting))
        answers = [row["answer"], *row.get("answer_aliases", [])] if row.get("answer") else []
        kind = str(row["id"]).split("__", 1)[0] if "__" in str(row["id"]) else None
        questions.append(
            EvalQuestion(
                id=str(row["id"]), question=row["question"], answers=answers, gold=gold, kind=kind
            )
        )
    return EvalDataset(name=name, questions=questions, passages=pool.passages)


def load_beir_gold_pool(
    rows: Iterable[dict[str, Any]], qrels: dict[str, dict[str, int]], name: str = "beir"
) -> EvalDataset:
    """HippoRAG's BEIR files: each query with its relevant passages, plus the qrels."""
    pool = Pool()
    rows = list(rows)
    doc_ids: dict[str, str] = {}
    for row in rows:
        for paragraph in row["paragraphs"]:
            doc_ids[str(paragraph["idx"])] = pool.add(paragraph["title"], paragraph["text"])
    questions = []
    for row in rows:
        query_id = str(row.get("_id", row.get("id")))
        relevant = [d for d, grade in qrels.get(query_id, {}).items() if grade > 0]
        gold = [doc_ids[d] for d in relevant if d in doc_ids]
        if gold:
            text = row.get("text") or row["question"]
            questions.append(EvalQuestion(id=query_id, question=text, gold=gold, kind="single-hop"))
    return EvalDataset(name=name, questions=questions, passages=pool.passages)


def load_beir_folder(folder: Path, split: str = "test") -> EvalDataset:
    """A standard BEIR folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``."""
    pool = Pool()
    doc_ids: dict[str, str] = {}
    for doc in _read_json_or_lines(folder / "corpus.jsonl"):
        doc_ids[str(doc["_id"])] = pool.add(doc.get("title", ""), doc["text"])
    queries = {str(q["_id"]): q["text"] for q in _read_json_or_lines(folder / "queries.jsonl")}
    relevant: dict[str, list[str]] = {}
    with (folder / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
        for record in csv.DictReader(handle, delimiter="\t"):
            if int(record["score"]) > 0 and record["corpus-id"] in doc_ids:
                relevant.setdefault(record["query-id"], []).append(doc_ids[record["corpus-id"]])
    questions = [
        EvalQuestion(id=qid, question=queries[qid], gold=gold, kind="single-hop")
        for qid, gold in relevant.items()
        if qid in queries
    ]
    return EvalDataset(name=folder.name, questions=questions, passages=pool.passages)


def load_simple(
    rows: Iterable[dict[str, Any]], corpus: Iterable[dict[str, Any]], name: str = "jsonl"
) -> EvalDataset:
    """``{"question", "answers", "gold": [corpus ids]}`` lines over a ``{"id", "title", "text"}``
    corpus; ``"answerable": false`` marks a question the corpus does not answer (``"gold": []``,
    no answers)."""
    pool = Pool()
    ids = {str(p["id"]): pool.add(p.get("title", ""), p["text"]) for p in corpus}
    questions = []
    for n, row in enumerate(rows):
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            raise DatasetError(f"question {n}: answerable must be true or false")
        gold = row["gold"] if answerable else row.get("gold", [])
        missing = [g for g in gold if str(g) not in ids]
        if missing:
            raise DatasetError(f"question {n}: gold ids {missing} are not in the corpus")
        questions.append(
            EvalQuestion(
                id=str(row.get("id", n)),
                question=row["question"],
                answers=list(row.get("answers", [])) if answerable else [],
                gold=[ids[str(g)] for g in gold] if answerable else [],
                kind=row.get("kind"),
                answerable=answerable,
            )
        )
    return EvalDataset(name=name, questions=questions, passages=pool.passages)


def _first(rows: Any) -> dict[str, Any]:
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        return rows[0]
    raise DatasetError("expected a list of JSON objects")


def load_dataset(path: str | Path, corpus: str | Path | None = None) -> EvalDataset:
    """Load any supported dataset, detecting the format from the file's fields. ``corpus`` is
    the MuSiQue/HippoRAG corpus file, the qrels file of a BEIR gold pool, or the corpus of a
    simple JSON Lines dataset; companion files next to ``path`` are found automatically."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"no dataset at {path}")
    if path.is_dir():
        return load_beir_folder(path)
    rows = _read_json_or_lines(path)
    first = _first(rows)
    name = path.stem
    try:
        if "supporting_facts" in first and "context" in first:
            return load_hotpotqa(rows, name)
        if "question_text" in first and "contexts" in first:
            return load_ircot(rows, name)
        if "question_decomposition" in first or ("paragraphs" in first and "answer" in first):
            companion = Path(corpus) if corpus else _companion(path, "_corpus.json")
            extra = _read_json_or_lines(companion) if companion and companion.exists() else []
            return load_musique(rows, extra, name)
        if "paragraphs" in first:
            qrels_path = Path(corpus) if corpus else _companion(path, "_qrel.json")
            if qrels_path is None or not qrels_path.exists():
                raise DatasetError(f"{path}: a BEIR gold pool needs its qrels file (corpus=...)")
            return load_beir_gold_pool(rows, _read_json_or_lines(qrels_path), name)
        if "gold" in first and "question" in first:
            if corpus is None:
                raise DatasetError(f"{path}: a simple JSON Lines dataset needs corpus=...")
            return load_simple(rows, _read_json_or_lines(Path(corpus)), name)
    except (KeyError, TypeError) as error:
        raise DatasetError(f"{path}: missing or malformed field {error}") from None
    raise DatasetError(f"{path}: unrecognised format (fields: {sorted(first)})")


def _companion(path: Path, suffix: str) -> Path | None:
    candidate = path.with_name(path.stem + suffix)
    return candidate if candidate.exists() else None


def iter_documents(dataset: EvalDataset, *, titles: bool = True) -> Iterator[tuple[str, str, str]]:
    """(passage id, text, title) for ingesting the pool into a knowledge base; with
    ``titles=False`` every title is "" (the ablation with titles left out of the index)."""
    for passage in dataset.passages:
        yield passage.id, passage.text, (passage.title if titles else "")
