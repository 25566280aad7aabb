"""How ragloop's modules are found: package faces that import a name the first time it is
used, and old import paths of modules that moved.

A package's face lists its public names in ``__all__`` and imports each from its module on first
use (PEP 562), so importing the package loads nothing. A package calls :func:`lazy_face` with
where each public name lives and defines its module ``__getattr__`` and ``__dir__`` from it::

    _FACE = lazy_face(__name__, {"ragloop.kb.knowledge_base": ("KnowledgeBase",)})
    __all__ = _FACE.names

    def __getattr__(name: str) -> object:
        return _FACE.resolve(name)

A package whose modules moved calls :func:`keep_old_paths` in its ``__init__`` with a map of old
submodule names to new dotted paths: ``import old.path`` then gives the module at its new path,
the very same module object (a class is one class under both names, and patching either patches
both); nothing is imported until an old path is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

# Neither dataclasses nor importlib.abc: this module loads with ``import ragloop``, and those two
# would triple its import time (inspect, importlib.resources).


class LazyFace:
    def __init__(self, package: str, exports: dict[str, tuple[str, ...]]) -> None:
        self.package = package
        self.exports = exports  # module -> the public names it defines

    @property
    def module_of(self) -> dict[str, str]:
        return {name: module for module, names in self.exports.items() for name in names}

    @property
    def names(self) -> list[str]:
        return sorted(self.module_of)

    def resolve(self, name: str) -> object:
        """The public ``name``, imported from its module (and kept on the package)."""
        if name not in self.module_of:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(self.module_of[name]), name)
        setattr(sys.modules[self.package], name, value)
        return value

    def dir(self) -> list[str]:
        return sorted({*vars(sys.modules[self.package]), *self.module_of})


def lazy_face(package: str, exports: Mapping[str, Sequence[str]]) -> LazyFace:
    """The face of ``package``: ``exports`` maps a module to the public names it defines."""
    return LazyFace(package, {module: tuple(names) for module, names in exports.items()})


class _MovedModules:
    """A finder on ``sys.meta_path`` and the loader of what it finds."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module puts the moved module in its place

    def exec_module(self, module: ModuleType) -> None:
        # the import system hands back whatever sys.modules holds under the name once this
        # returns, so the old name becomes the new module itself
        sys.modules[module.__name__] = importlib.import_module(self.moved[module.__name__])


def keep_old_paths(package: str, moved: Mapping[str, str]) -> None:
    """Make ``package.<old>`` import the module at ``moved[old]`` for every entry."""
    finder = _MovedModules({f"{package}.{old}": new for old, new in moved.items()})
    sys.meta_path.insert(0, finder)
