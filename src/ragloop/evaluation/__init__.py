"""Evaluation: datasets with gold passages, metrics, paired tests, the harness and reports.

- ``datasets.py``: the benchmark formats (HotpotQA, IRCoT, MuSiQue, BEIR, simple JSONL) read
  into one shape;
- ``configurations.py``: a knowledge base built from a dataset's pool, one-shot retrieval in
  each mode and the loops over it;
- ``harness.py``: every configuration on every question, at equal k;
- ``metrics.py``: retrieval (recall, MRR, nDCG) and answers (exact match, F1); ``stats.py``:
  paired significance tests;
- ``report.py``: a markdown table, JSON and a chart of recall against k.
"""
