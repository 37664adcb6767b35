"""The source-kind interface and registry: every ``KIND:`` prefix of a dataset spec is one entry.

A kind is a :class:`SourceKind` entry of :data:`SOURCE_KINDS`: its spec syntax, the options it accepts
(``--set ingest.options.KEY=VALUE``, each with a value parser) and ``open(rest, spec, options)``, which turns
the text after ``KIND:`` into a :class:`~pipelines.methods.sources.base.GraphSource`. Adding one: a module that
registers its kind, plus one import line in ``pipelines/methods/sources/__init__.py`` (``docs/EXTENDING.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.methods.sources.base import GraphSource
from pipelines.methods.sources.options import OptionParser
from storage_kernels.registry import Registry

__all__ = ["SOURCE_KINDS", "SourceKind", "parse_options"]

OpenFn = Callable[[str, str, dict[str, Any]], GraphSource]  # (text after "KIND:", whole spec, parsed options)


@dataclass(frozen=True)
class SourceKind:
    """One ``kind:`` prefix: its syntax, its options (name -> value parser), a one-line help, its opener."""

    kind: str
    syntax: str
    options: Mapping[str, OptionParser]
    help: str
    open: OpenFn


#: Every source kind, by the prefix of ``--dataset KIND:...``.
SOURCE_KINDS: Registry[SourceKind] = Registry("dataset kind")


def parse_options(kind: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check option keys against the kind's list and parse their values."""
    valid = SOURCE_KINDS.get(kind).options
    parsed: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in valid:
            raise ValueError(f"'option {key}' expected one of {list(valid)} for {kind} sources (got {key!r})")
        parsed[key] = valid[key](f"option {key}", value)
    return parsed
