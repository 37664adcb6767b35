"""On-disk layout of offline samples: every mini-batch's layered blocks, concatenated.

A sample set holds the batches of one ``sample`` artifact (``docs/CONTRACTS.md``, "Samples"):

``nodes.npy``
    int64, every batch's node list back to back. Within one batch the first ``num_seeds`` nodes are the
    seeds; ``nodes[:hop_counts[h]]`` are the nodes known after hop ``h``; all of them are input nodes.
``indptr.npy`` / ``cols.npy``
    int64, per batch and per hop ``h`` the CSR of hop ``h``: destinations ``nodes[:hop_counts[h]]``,
    sources are positions into the batch's ``nodes`` (all ``< hop_counts[h + 1]``).
``batches.parquet``
    one row per batch with its split, epoch, step and the offsets into the three arrays.

The node lists double as the access trace that the planner counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from storage_kernels.arrays import ArrayWriter
    from storage_kernels.store import ArtifactBuilder

__all__ = ["SPLITS", "Block", "SampleSetView", "SampledBatch", "SampleSet", "SampleSetWriter"]

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Block:
    """One message-passing layer: ``num_dst`` destinations aggregate from ``num_src`` sources.

    Destinations are ``nodes[:num_dst]`` and sources ``nodes[:num_src]`` of the owning batch, so a
    destination is also a source (its own previous-layer state is at the same position).
    ``indptr`` (num_dst + 1) and ``cols`` (positions ``< num_src``) form the CSR of sampled edges.
    """

    num_src: int
    num_dst: int
    indptr: np.ndarray
    cols: np.ndarray


@dataclass(frozen=True)
class SampledBatch:
    """One offline-sampled mini-batch (see the module docstring for the layout)."""

    batch: int
    split: str
    epoch: int
    step: int
    nodes: np.ndarray
    hop_counts: np.ndarray
    indptrs: list[np.ndarray]
    cols: list[np.ndarray]

    @property
    def num_seeds(self) -> int:
        return int(self.hop_counts[0])

    @property
    def num_layers(self) -> int:
        return len(self.indptrs)

    @property
    def seeds(self) -> np.ndarray:
        return self.nodes[: self.num_seeds]

    def blocks(self) -> list[Block]:
        """Blocks ordered input layer first: block ``i`` is hop ``L - 1 - i``."""
        out = []
        for hop in reversed(range(self.num_layers)):
            out.append(
                Block(
                    num_src=int(self.hop_counts[hop + 1]),
                    num_dst=int(self.hop_counts[hop]),
                    indptr=self.indptrs[hop],
                    cols=self.cols[hop],
                )
            )
        return out


class SampleSet:
    """Read-only view of a ``sample`` artifact directory (arrays are memory-mapped)."""

    def __init__(self, path: str | Path, fanouts: Sequence[int] | None = None) -> None:
        self.path = Path(path)
        index_path = self.path / "batches.parquet"
        if not index_path.exists():
            raise FileNotFoundError(f"'samples' expected {index_path} (got no such file)")
        table = pq.ParquetFile(index_path).read()  # not read_table: it imports pyarrow.dataset (0.7 s)
        self._split = np.asarray(table.column("split").to_pylist(), dtype=object)
        self._epoch = table.column("epoch").to_numpy()
        self._step = table.column("step").to_numpy()
        self._node_offset = table.column("node_offset").to_numpy()
        self._indptr_offset = table.column("indptr_offset").to_numpy()
        self._cols_offset = table.column("cols_offset").to_numpy()
        self._hop_counts = [np.asarray(h, dtype=np.int64) for h in table.column("hop_counts").to_pylist()]
        self._edge_counts = [np.asarray(e, dtype=np.int64) for e in table.column("edge_counts").to_pylist()]
        self.nodes = np.load(self.path / "nodes.npy", mmap_mode="r")
        self.indptr = np.load(self.path / "indptr.npy", mmap_mode="r")
        self.col = np.load(self.path / "cols.npy", mmap_mode="r")
        self.fanouts = list(fanouts) if fanouts is not None else None
        for i in range(len(self._hop_counts)):
            if self._node_offset[i] + self._hop_counts[i][-1] > len(self.nodes):
                raise ValueError(
                    f"'{index_path}' batch {i} expected nodes within nodes.npy "
                    f"(got offset {self._node_offset[i]} + {self._hop_counts[i][-1]} > {len(self.nodes)})"
                )

    @property
    def num_batches(self) -> int:
        return len(self._hop_counts)

    @property
    def epochs(self) -> int:
        """Number of sampled training epochs."""
        train = self._epoch[self._split == "train"]
        return int(train.max()) + 1 if len(train) else 0

    @property
    def num_layers(self) -> int:
        return len(self._hop_counts[0]) - 1 if self._hop_counts else 0

    def node_range(self, i: int) -> tuple[int, int]:
        """``(start, stop)`` of batch ``i``'s node list within ``nodes.npy``."""
        start = int(self._node_offset[i])
        return start, start + int(self._hop_counts[i][-1])

    def batch_ids(self, split: str, epoch: int | None = None) -> list[int]:
        """Batch ids of one split (and, for ``train``, one sampled epoch) in step order."""
        if split not in SPLITS:
            raise ValueError(f"'split' expected one of {SPLITS} (got {split!r})")
        mask = self._split == split
        if epoch is not None:
            mask &= self._epoch == epoch
        ids = np.flatnonzero(mask)
        return ids[np.argsort(self._step[ids], kind="stable")].tolist()

    def batch(self, i: int) -> SampledBatch:
        if not 0 <= i < self.num_batches:
            raise IndexError(f"'batch' expected 0 <= i < {self.num_batches} (got {i})")
        start, stop = self.node_range(i)
        hop_counts = self._hop_counts[i]
        edge_counts = self._edge_counts[i]
        indptrs, cols = [], []
        ip, cp = int(self._indptr_offset[i]), int(self._cols_offset[i])
        for hop in range(len(edge_counts)):
            n = int(hop_counts[hop]) + 1
            indptrs.append(np.asarray(self.indptr[ip : ip + n]))
            cols.append(np.asarray(self.col[cp : cp + int(edge_counts[hop])]))
            ip += n
            cp += int(edge_counts[hop])
        return SampledBatch(
            batch=i,
            split=str(self._split[i]),
            epoch=int(self._epoch[i]),
            step=int(self._step[i]),
            nodes=np.asarray(self.nodes[start:stop]),
            hop_counts=hop_counts,
            indptrs=indptrs,
            cols=cols,
        )

    def __len__(self) -> int:
        return self.num_batches


class SampleSetView:
    """A sample set built over another (``self.samples``): the batch count, epochs, layers and batch lists
    are the underlying set's unless a subclass overrides them (a policy's own training batches)."""

    samples: SampleSet

    @property
    def num_batches(self) -> int:
        return self.samples.num_batches

    @property
    def epochs(self) -> int:
        return self.samples.epochs

    @property
    def num_layers(self) -> int:
        return self.samples.num_layers

    def batch_ids(self, split: str, epoch: int | None = None) -> list[int]:
        return self.samples.batch_ids(split, epoch)


class SampleSetWriter:
    """Streams batches into a sample set inside an :class:`ArtifactBuilder` (bounded memory)."""

    def __init__(self, builder: ArtifactBuilder) -> None:
        self._nodes: ArrayWriter = builder.array_writer("nodes.npy", np.int64)
        self._indptr: ArrayWriter = builder.array_writer("indptr.npy", np.int64)
        self._cols: ArrayWriter = builder.array_writer("cols.npy", np.int64)
        self._builder = builder
        self._rows: dict[str, list] = {
            k: []
            for k in (
                "batch", "split", "epoch", "step", "num_seeds", "node_offset",
                "indptr_offset", "cols_offset", "hop_counts", "edge_counts",
            )
        }
        self._offsets = [0, 0, 0]
        self.num_batches = 0
        self.total_nodes = 0
        self.total_edges = 0

    def add(
        self,
        split: str,
        epoch: int,
        step: int,
        nodes: np.ndarray,
        hop_counts: np.ndarray,
        indptrs: Sequence[np.ndarray],
        cols: Sequence[np.ndarray],
    ) -> int:
        """Append one batch (the output of ``sample_blocks``); returns its batch id."""
        if split not in SPLITS:
            raise ValueError(f"'split' expected one of {SPLITS} (got {split!r})")
        if len(indptrs) != len(hop_counts) - 1 or len(cols) != len(indptrs):
            raise ValueError(
                f"'hop_counts' expected {len(indptrs) + 1} entries for {len(indptrs)} hops "
                f"(got {len(hop_counts)})"
            )
        if int(hop_counts[-1]) != len(nodes):
            raise ValueError(f"'nodes' expected {int(hop_counts[-1])} entries (got {len(nodes)})")
        r = self._rows
        r["batch"].append(self.num_batches)
        r["split"].append(split)
        r["epoch"].append(int(epoch))
        r["step"].append(int(step))
        r["num_seeds"].append(int(hop_counts[0]))
        r["node_offset"].append(self._offsets[0])
        r["indptr_offset"].append(self._offsets[1])
        r["cols_offset"].append(self._offsets[2])
        r["hop_counts"].append([int(h) for h in hop_counts])
        r["edge_counts"].append([len(c) for c in cols])
        self._nodes.append(np.asarray(nodes, dtype=np.int64))
        self._offsets[0] += len(nodes)
        for ip, cl in zip(indptrs, cols, strict=True):
            self._indptr.append(np.asarray(ip, dtype=np.int64))
            self._cols.append(np.asarray(cl, dtype=np.int64))
            self._offsets[1] += len(ip)
            self._offsets[2] += len(cl)
        self.num_batches += 1
        self.total_nodes += len(nodes)
        self.total_edges += sum(len(c) for c in cols)
        return self.num_batches - 1

    def close(self) -> None:
        """Finish the array files and write ``batches.parquet``."""
        self._nodes.close()
        self._indptr.close()
        self._cols.close()
        r = self._rows
        table = pa.table(
            {
                "batch": pa.array(r["batch"], pa.int64()),
                "split": pa.array(r["split"], pa.string()),
                "epoch": pa.array(r["epoch"], pa.int64()),
                "step": pa.array(r["step"], pa.int64()),
                "num_seeds": pa.array(r["num_seeds"], pa.int64()),
                "node_offset": pa.array(r["node_offset"], pa.int64()),
                "indptr_offset": pa.array(r["indptr_offset"], pa.int64()),
                "cols_offset": pa.array(r["cols_offset"], pa.int64()),
                "hop_counts": pa.array(r["hop_counts"], pa.list_(pa.int64())),
                "edge_counts": pa.array(r["edge_counts"], pa.list_(pa.int64())),
            }
        )
        self._builder.write_parquet("batches.parquet", table)
