"""ragloop's public API is exactly ``__all__``: sorted, complete, and nothing stray."""

from __future__ import annotations

from types import ModuleType

import ragloop


def test_all_is_sorted_and_unique():
    assert ragloop.__all__ == sorted(set(ragloop.__all__))


def test_every_public_name_is_exported_and_every_export_exists():
    # subpackages appear as attributes once imported; they are reached by path, not exported
    public = {
        name
        for name in dir(ragloop)
        if not name.startswith("_") and not isinstance(getattr(ragloop, name), ModuleType)
    }
    exported = set(ragloop.__all__) - {"__version__"}
    assert public == exported
    for name in ragloop.__all__:
        assert hasattr(ragloop, name)


def test_exported_classes_say_they_belong_to_ragloop():
    for name in ragloop.__all__:
        member = getattr(ragloop, name)
        module = getattr(member, "__module__", "ragloop")
        assert module.startswith("ragloop"), (name, module)
