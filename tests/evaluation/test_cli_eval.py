"""ragloop eval, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def test_eval_prints_tables_and_writes_json_and_chart(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragloop",
            "eval",
            str(FIXTURES / "hotpot_official.json"),
            "--embedder",
            "hash",
            "--kb",
            str(tmp_path / "kb.sqlite"),
            "--engine",
            "bm25",
            "--engine",
            "retrieval",
            "--set",
            "max_iterations=2",
            "--json",
            str(tmp_path / "report.json"),
            "--chart",
            str(tmp_path / "chart.png"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    assert "one-shot bm25" in result.stdout
    assert "RetrievalLoop" in result.stdout
    assert "recall@5 against the best one-shot baseline" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert [s["name"] for s in report["summaries"]] == ["one-shot bm25", "RetrievalLoop"]
    assert len(report["results"]["RetrievalLoop"]) == 2
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_rejects_a_bad_setting_and_a_bad_dataset(tmp_path):
    # a cache of its own: the default knowledge base lives in the user's cache, which other
    # checkouts of ragloop on the machine share (and may have written with a newer schema)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    bad_setting = subprocess.run(
        [sys.executable, "-m", "ragloop", "eval", str(FIXTURES / "ircot.jsonl"), "--set", "oops"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad_setting.returncode == 2
    assert "KEY=VALUE" in bad_setting.stderr
    assert not (tmp_path / "cache").exists()  # refused before any knowledge base was built
    (tmp_path / "odd.json").write_text('[{"foo": 1}]')
    bad_data = subprocess.run(
        [sys.executable, "-m", "ragloop", "eval", str(tmp_path / "odd.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad_data.returncode == 1
    assert "unrecognised format" in bad_data.stderr
