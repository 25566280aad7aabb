"""Pluggable components, one role a module, each with its offline (heuristic) and its LLM-backed
implementation: ``evaluators.py``, ``generators.py``, ``reformulators.py``, ``refiners.py``,
``understanding.py``, ``grounding.py``, ``citations.py``, ``cost.py``. What the offline ones are
built from is in ``heuristics/`` (corpus, questions, names, the judge, the extractive answer,
rewrites, the rule-based controller); what the LLM ones share is in ``llm/`` (prompts, fitting a
conversation to a window). The old paths (``ragloop.components.corpus``, ...) still import the
moved modules."""

from ragloop.core.imports import keep_old_paths, lazy_face

keep_old_paths(
    __name__,
    {
        "corpus": "ragloop.components.heuristics.corpus",
        "questions": "ragloop.components.heuristics.questions",
        "naming": "ragloop.components.heuristics.naming",
        "judging": "ragloop.components.heuristics.judging",
        "extractive": "ragloop.components.heuristics.extractive",
        "rewriting": "ragloop.components.heuristics.rewriting",
        "controller": "ragloop.components.heuristics.controller",
        "prompts": "ragloop.components.llm.prompts",
        "fitting": "ragloop.components.llm.fitting",
    },
)

_FACE = lazy_face(
    __name__,
    {
        "ragloop.components.heuristics.controller": ("OfflineController",),
        "ragloop.components.heuristics.corpus": ("Corpus",),
        "ragloop.components.cost": ("DefaultCostEstimator",),
        "ragloop.components.evaluators": ("HeuristicEvaluator", "LLMEvaluator"),
        "ragloop.components.generators": ("ExtractiveGenerator", "LLMGenerator"),
        "ragloop.components.grounding": ("LexicalGrounder", "LLMJudgeGrounder"),
        "ragloop.components.refiners": (
            "EntityBridgeRefiner",
            "KeywordRefiner",
            "PseudoRelevanceRefiner",
            "RefinerChain",
        ),
        "ragloop.components.reformulators": ("HeuristicReformulator", "LLMReformulator"),
        "ragloop.components.understanding": ("HeuristicUnderstander", "LLMUnderstander"),
    },
)
__all__ = _FACE.names


def __getattr__(name: str) -> object:
    return _FACE.resolve(name)


def __dir__() -> list[str]:
    return _FACE.dir()
