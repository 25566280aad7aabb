"""Evaluation: datasets with gold passages, metrics, paired tests, the harness and reports."""
