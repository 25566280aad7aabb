"""What the offline judge's score promises: the shipped calibration of the offline engines.

The :class:`~ragloop.HeuristicEvaluator` scores an answer as the chance that it is right
(fitted on HotpotQA and MuSiQue). Read that way, standing by the answers whose chance reaches
0.5 stood by confidently wrong answers on corpora it was not fitted on. The offline engines read
the score through a ``selective`` :class:`~ragloop.components.calibration.Calibration` instead:
a score stands for the precision of the answers scored at least as high, fitted by
``benchmarks/calibrate_confidence.py`` over the runs of RAGLoop.offline and AgentLoop.offline on
several corpora together (the demo shop, the Python docs, HotpotQA, MuSiQue), each corpus
checked with a fit that left it out (BENCHMARKS.md). A user who fits one on their own
questions (``ragloop eval --calibrate``) passes it as ``calibration=`` and it replaces this one.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from ragloop.components.calibration import Calibration

CALIBRATION_FILE = "offline_calibration.json"


@cache
def offline_calibration() -> Calibration:
    """The shipped calibration of the offline judge's score (read once)."""
    text = files(__package__).joinpath(CALIBRATION_FILE).read_text(encoding="utf-8")
    return Calibration.model_validate_json(text)
