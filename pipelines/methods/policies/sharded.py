"""A policy's pack split into a global part, shards of independent work and a merge (:mod:`pipelines.shards.pack`).

Which policies shard, and how:

- ``diskgnn``: the cache blocks, the (m, s) search, the segment disk caches and the window schedule are global
  (computed once, in the prep); the units are the sample set's batches: a shard writes its batches' address
  tables and packed chunks; the merge copies the prep's files and concatenates the shards'.
- ``ginex``: nothing is global but the trace; the units are superbatches (each one's Belady simulation is
  independent): a shard is the changeset store of its superbatches; the merge appends them in order.
- ``hyperbatch``: the units are the row groups of ``aligned.bin`` (the block-aligned rewrite of the feature file,
  the pack's byte work): a shard writes its groups, which is that byte range of the file; the merge
  concatenates them and computes the hyperbatch tables (global, but cheap: no feature bytes).
- every policy that lays nothing out (``in_memory``, ``mmap``, ``naive``): no units; the merge writes the
  (empty) layout.
- ``mariusgnn``, ``outre``: not shardable here (the partition file and its sets, the historical cache's
  schedule: passes over the whole feature file or trace); ``pipelines.shards.pack.sharded_pack_for`` raises,
  naming the policies that shard; materialize the unpartitioned ``pack`` asset instead.

Each policy says how it shards (``Policy.sharded_pack``, beside its ``pack``); this module holds the interface
and what the shard classes share. Every merge writes the files and statistics the policy's own ``pack``
writes, byte for byte.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies.inputs import PackInputs

if TYPE_CHECKING:
    from storage_kernels.store import Artifact, ArtifactBuilder

__all__ = ["NoLayout", "ShardedPack", "append_rows", "copy_file"]

_COPY_ROWS = 1 << 22  # rows per append when concatenating shard arrays (bounds the merge's memory)


class ShardedPack(ABC):
    """How one policy's pack runs partitioned: :meth:`prepare` once, :meth:`shard` per range of its units,
    :meth:`merge` over every shard in order (each writes into ``inputs.builder``)."""

    @abstractmethod
    def prepare(self, inputs: PackInputs) -> int:
        """Write the global part into the prep artifact's builder; returns the number of units shards cut."""

    @abstractmethod
    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        """Write units ``[lo, hi)`` into a shard artifact's builder; returns its statistics."""

    @abstractmethod
    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        """Write the ``pack`` artifact from the prep and the shards (in order); returns what the policy's
        ``pack`` returns."""


def copy_file(builder: ArtifactBuilder, name: str, sources: Sequence[Path]) -> Path:
    """``name`` in ``builder``: the bytes of ``sources`` one after another (copied in 16 MiB pieces)."""
    path = builder.add_file(name)
    with open(path, "wb") as out:
        for source in sources:
            with open(source, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 24)  # large reads: no per-byte work in Python
    return path


def append_rows(writer: Any, array: np.ndarray) -> None:
    """Append ``array`` to an array writer in pieces of at most ``_COPY_ROWS`` rows (bounds the merge's memory)."""
    for lo in range(0, len(array), _COPY_ROWS):
        writer.append(np.asarray(array[lo : lo + _COPY_ROWS]))


class NoLayout(ShardedPack):
    """Policies that lay nothing out: no units, the merge writes what their ``pack`` writes (statistics)."""

    def __init__(self, pack: Callable[[PackInputs], dict[str, Any]]) -> None:
        self.pack = pack

    def prepare(self, inputs: PackInputs) -> int:
        return 0

    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        return {}

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        return self.pack(inputs)
