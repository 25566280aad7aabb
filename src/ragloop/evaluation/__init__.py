"""Evaluation: datasets with gold passages, metrics, paired tests, the harness and reports.

- ``datasets.py``: the benchmark formats (HotpotQA, IRCoT, MuSiQue, BEIR, simple JSONL) read
  into one shape;
- ``configurations.py``: a knowledge base built from a dataset's pool, one-shot retrieval in
  each mode and the loops over it;
- ``harness.py``: every configuration on every question, at equal k;
- ``metrics.py``: retrieval (recall, MRR, nDCG) and answers (exact match, F1); ``stats.py``:
  paired significance tests;
- ``selective.py``: answering only when likely right: the risk-coverage curve, AURC, precision
  at a target, refusal precision and recall, and a calibration checked in-sample and
  cross-validated;
- ``report.py``: markdown tables, JSON and a chart of recall against k (and risk-coverage).
"""
