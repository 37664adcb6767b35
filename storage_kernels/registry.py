"""Named registries: the one seam through which Strata picks a method by name.

Every choice a configuration names -- a partitioner, a reorder strategy, a sampler, a source kind, a model,
a cache/batching policy -- is an entry of a :class:`Registry`. Code looks an entry up by name
(:meth:`Registry.get`) instead of branching on strings, and an unknown name is one clear error listing the
known ones. Adding a method is one new module that registers its entry, plus one line that imports that module
(the package's list of built-ins), or a ``strata.plugins`` entry point in another distribution:

>>> ORDERS = Registry("reorder.strategy")
>>> @ORDERS.register("reverse")
... def reverse(graph, cfg, info):
...     return np.arange(graph.num_nodes)[::-1]
>>> ORDERS.get("reverse") is reverse
True

A registry may name a ``provider``: the module that registers its built-in entries, imported on the first
lookup instead of by whoever defines the registry, with the names it registers declared up front
(:meth:`Registry.declare`).
:meth:`Registry.check` accepts a declared name without importing the provider, so validating a
configuration does not import what the entries need (``train.model``'s provider imports torch, which a
preprocessing step never uses):

>>> MODELS = Registry("train.model", provider="trainer.models")
>>> MODELS.declare("graphsage", "gcn", "gat")
>>> MODELS.check("gat")                   # no import
>>> MODELS.get("gat")                     # imports trainer.models, which registers the three

Plugins: every ``strata.plugins`` entry point (``[project.entry-points."strata.plugins"]``) is imported once,
the first time any registry is searched, so a separately installed package can register entries without
touching Strata's files.

This module lives in the lowest package because every layer has registries (models in ``trainer``, I/O
choices here, stages and policies in ``pipelines``); it imports nothing of ours.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

__all__ = ["PLUGIN_GROUP", "Registry", "load_plugins"]

T = TypeVar("T")

#: Entry-point group whose modules are imported before the first registry lookup.
PLUGIN_GROUP = "strata.plugins"

_plugins_lock = threading.Lock()
_plugins_loaded = False


def load_plugins(force: bool = False) -> list[str]:
    """Import every ``strata.plugins`` entry point once (again with ``force``); returns their names.

    A plugin that fails to import raises ``ImportError`` naming the entry point: a broken plugin is an error
    the user must see, not a silently missing method.
    """
    global _plugins_loaded
    with _plugins_lock:
        if _plugins_loaded and not force:
            return []
        _plugins_loaded = True
        loaded = []
        for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
            try:
                entry.load()
            except Exception as e:
                raise ImportError(f"'{PLUGIN_GROUP}' entry point {entry.name!r} ({entry.value}) expected to "
                                  f"import (got {type(e).__name__}: {e})") from e
            loaded.append(entry.name)
        return loaded


class Registry(Generic[T]):
    """Entries of one kind, by name, in registration order.

    ``kind`` names the configuration key the names come from (``"partition.method"``), so errors point at
    what the user wrote.
    """

    def __init__(self, kind: str, provider: str | None = None) -> None:
        self.kind = kind
        self.provider = provider
        self._entries: dict[str, T] = {}
        self._declared: tuple[str, ...] = ()
        self._provided = provider is None
        self._lock = threading.Lock()

    def declare(self, *names: str) -> None:
        """Names the ``provider`` module registers: :meth:`check` accepts them before it is imported. The first
        import of the provider checks that it registered every one of them."""
        self._declared = (*self._declared, *names)

    def _load_provider(self) -> None:
        if self._provided:
            return
        importlib.import_module(self.provider)  # type: ignore[arg-type]  # registers the built-ins
        self._provided = True
        missing = [n for n in self._declared if n not in self._entries]
        if missing:
            raise ImportError(f"'{self.kind}' expected {self.provider} to register the declared names "
                              f"{', '.join(missing)} (it registered {', '.join(self._entries) or 'none'})")

    def check(self, name: str) -> None:
        """``ValueError`` listing the known names unless ``name`` is registered or declared; does not import the
        provider for a declared name (configuration validation uses this)."""
        if name not in self._entries and name not in self._declared:
            self.get(name)

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, entry: T) -> T: ...

    def register(self, name: str, entry: T | None = None, *, replace: bool = False) -> T | Callable[[T], T]:
        """Register ``entry`` under ``name`` (or use as a decorator). A taken name is refused unless
        ``replace`` (tests and plugins that deliberately shadow a built-in)."""
        if not name or not isinstance(name, str) or name != name.strip():
            raise ValueError(f"'{self.kind}' expected a non-empty name without surrounding spaces (got {name!r})")

        def add(value: T) -> T:
            with self._lock:
                if name in self._entries and not replace and self._entries[name] is not value:
                    raise ValueError(f"'{self.kind}' expected a new name (got {name!r}, already registered)")
                self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> T:
        """Remove and return ``name``'s entry (tests clean up their toy entries with it)."""
        with self._lock:
            if name not in self._entries:
                raise KeyError(f"'{self.kind}' has no entry {name!r}")
            return self._entries.pop(name)

    def get(self, name: str) -> T:
        """The entry registered as ``name``; ``ValueError`` listing the known names otherwise."""
        entry = self._entries.get(name)
        if entry is None:
            self._load_provider()
            load_plugins()
            entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"'{self.kind}' expected one of {', '.join(self.names())} (got {name!r})")
        return entry

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order (the provider's and plugins' included)."""
        self._load_provider()
        load_plugins()
        return tuple(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self._load_provider()
        load_plugins()
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self._load_provider()
            load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"
