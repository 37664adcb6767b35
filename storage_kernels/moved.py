"""Modules that moved keep answering to their old names: ``python -m``, imports and plugins written for them.

A package that regroups its modules lists what moved (``{"pkg.old": "pkg.new.place"}``) and calls
:func:`install_moved` from its ``__init__``. An import of an old name, or of anything under it, then gives the
module of the new name itself (the same object, so registries and classes are never duplicated), with a
``DeprecationWarning`` that names the new place; ``python -m OLD`` runs the new module's code as ``__main__``.
The longest listed prefix wins, so a package and one of its modules can move to different places.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping
from types import CodeType, ModuleType

__all__ = ["install_moved", "moved_name"]

_TABLE: dict[str, str] = {}


def moved_name(name: str) -> str | None:
    """The current name of module ``name`` if it (or a package above it) moved, else None."""
    old = max((o for o in _TABLE if name == o or name.startswith(o + ".")), key=len, default=None)
    return None if old is None else _TABLE[old] + name[len(old):]


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new name (imported once, under the new name)."""

    def __init__(self, new: str, spec: importlib.machinery.ModuleSpec) -> None:
        self.new, self.spec = new, spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        # the import system set __spec__ to the old name's spec; the module stays what it is under its new name
        module.__spec__ = self.spec

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code (``runpy`` runs it as ``__main__`` for ``python -m OLD``)."""
        loader = self.spec.loader
        return loader.get_code(self.new) if isinstance(loader, importlib.abc.InspectLoader) else None


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = moved_name(fullname)
        if new is None:
            return None
        spec = importlib.util.find_spec(new)
        if spec is None:
            return None
        warnings.warn(f"module {fullname} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(new, spec),
                                               is_package=spec.submodule_search_locations is not None)


_FINDER = _MovedFinder()


def install_moved(table: Mapping[str, str]) -> None:
    """Answer every old module name in ``table`` (and the names under it) with the module of its new name."""
    for old, new in table.items():
        if old == new or new.startswith(old + "."):
            raise ValueError(f"'moved' expected a new place outside the old name (got {old!r} -> {new!r})")
    _TABLE.update(table)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
