"""ragloop's front door: ``__all__`` is sorted, small (what a newcomer needs and ragsnag's names)
and nothing stray; every other public name resolves from the root and from its own package's
face (issue 33, item 4)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import ragloop

# ragsnag.__all__ (seed 000): its API stays importable from the root, name for name
RAGSNAG = {
    "__version__",
    "RAGLoop",
    "LoopConfig",
    "Chunk",
    "GeneratorOutput",
    "EvaluationResult",
    "LoopIteration",
    "LoopResult",
    "ReformulationOutput",
    "ReformulationStrategy",
    "StopReason",
    "Retriever",
    "Generator",
    "Evaluator",
    "Reformulator",
    "LLMEvaluator",
    "LLMReformulator",
    "HeuristicReformulator",
}


def test_all_is_sorted_unique_small_and_holds_ragsnags_names():
    assert ragloop.__all__ == sorted(set(ragloop.__all__))
    assert len(ragloop.__all__) <= 50
    assert set(ragloop.__all__) >= RAGSNAG


def test_the_front_door_lists_only_its_names_even_after_others_were_used():
    code = (
        "import ragloop, types\n"
        "ragloop.SemanticEmbeddingCache, ragloop.Corpus, ragloop.parse_llm_json\n"
        "public = {n for n in dir(ragloop) if not n.startswith('_')"
        " and not isinstance(getattr(ragloop, n), types.ModuleType)}\n"
        "assert public == set(ragloop.__all__) - {'__version__'}, public ^ set(ragloop.__all__)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in ragloop.__all__:
        assert hasattr(ragloop, name)


def test_every_public_name_resolves_from_the_root_and_from_its_packages_face():
    faces = {}
    for module, names in ragloop._EXPORTS.items():
        package = ".".join(module.split(".")[:2])
        face = faces.setdefault(package, importlib.import_module(package))
        for name in names:
            member = getattr(face, name)
            assert name in face.__all__, (package, name)
            assert getattr(ragloop, name) is member
            assert member is getattr(importlib.import_module(module), name)


def test_exported_classes_say_they_belong_to_ragloop():
    for name in {n for names in ragloop._EXPORTS.values() for n in names}:
        member = getattr(ragloop, name)
        module = getattr(member, "__module__", "ragloop")
        assert module.startswith("ragloop"), (name, module)
        assert not isinstance(member, ModuleType)
