"""The subgraph file the browser app reads: a JSON header plus little-endian binary arrays.

``subgraph.json`` (``format: strata-subgraph``, ``format_version: 1``) names every array of ``subgraph.bin``
with ``dtype`` (``float32`` | ``int64``), ``shape``, ``offset`` (16-byte aligned, so a typed-array view in
JavaScript needs no copy) and ``nbytes``, plus ``inputs`` (the ONNX input names, in order), ``num_layers``,
``num_seeds``, ``num_nodes``, ``feature_dim``, ``layers`` (per layer, input layer first: ``num_src``,
``num_dst``, ``num_edges``) and ``data`` (``file``, ``bytes``, ``sha256``). The arrays are the model's feed
(``x`` (num_nodes, feature_dim) float32; per layer ``i``: ``edge_src_i``, ``edge_dst_i``, ``dst_pos_i``
int64), ``node_ids`` (num_nodes,) int64 (the dataset's original ids) and ``labels`` (num_seeds,) int64
(``-1`` = unlabelled). The seeds are the first ``num_seeds`` nodes, in Strata's prefix layout.

:func:`restrict_batch` cuts a sampled batch down to its first ``k`` seeds and the nodes their sampled
computation trees reach (vectorised NumPy), so the page gets a small subgraph whose predictions equal those of
the same seeds in the full batch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from storage_kernels.sampleset import SampledBatch

__all__ = ["SUBGRAPH_FORMAT", "Subgraph", "read_subgraph", "restrict_batch", "write_subgraph"]

SUBGRAPH_FORMAT = "strata-subgraph"
_ALIGN = 16


class Subgraph:
    """A read subgraph: ``feed`` (ONNX input name -> array), ``node_ids``, ``labels`` and the header."""

    def __init__(self, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.header = header
        self.arrays = arrays

    @property
    def feed(self) -> dict[str, np.ndarray]:
        """The onnxruntime input dict."""
        return {name: self.arrays[name] for name in self.header["inputs"]}

    @property
    def node_ids(self) -> np.ndarray:
        return self.arrays["node_ids"]

    @property
    def labels(self) -> np.ndarray:
        return self.arrays["labels"]


def restrict_batch(batch: SampledBatch, num_seeds: int, first: int = 0) -> SampledBatch:
    """Seeds ``first .. first + num_seeds - 1`` of ``batch`` with exactly the nodes and edges their computation
    trees use.

    Node order stays a prefix layout: the kept seeds, then the nodes first reached at hop 1, and so on; each
    hop's destinations keep their sampled edges (sources renumbered). Nodes keep their batch order within a hop.
    """
    if not 0 <= first < batch.num_seeds or not 1 <= num_seeds <= batch.num_seeds - first:
        raise ValueError(f"'num_seeds' expected 1 <= num_seeds <= {batch.num_seeds - first} (the batch's seeds "
                         f"from {first}) (got {num_seeds}, first {first})")
    kept = np.arange(first, first + num_seeds, dtype=np.int64)  # batch positions, in new order
    hop_counts = [num_seeds]
    indptrs: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for hop in range(batch.num_layers):
        indptr, col = batch.indptrs[hop], batch.cols[hop]
        start, stop = indptr[kept], indptr[kept + 1]  # (D,) each destination's edge range
        degree = stop - start
        # gather every kept destination's edges: position k of the output reads col[start[d] + (k - out[d])]
        out_ptr = np.zeros(len(kept) + 1, dtype=np.int64)
        np.cumsum(degree, out=out_ptr[1:])
        within = np.arange(out_ptr[-1], dtype=np.int64) - np.repeat(out_ptr[:-1], degree)
        sources = col[np.repeat(start, degree) + within]  # (E,) batch positions
        fresh = np.setdiff1d(np.unique(sources), kept, assume_unique=False)  # sorted batch positions
        kept = np.concatenate([kept, fresh])
        new_id = np.full(int(batch.hop_counts[hop + 1]), -1, dtype=np.int64)
        new_id[kept] = np.arange(len(kept), dtype=np.int64)
        indptrs.append(out_ptr)
        cols.append(new_id[sources])
        hop_counts.append(len(kept))
    return SampledBatch(batch=batch.batch, split=batch.split, epoch=batch.epoch, step=batch.step,
                        nodes=np.asarray(batch.nodes)[kept], hop_counts=np.asarray(hop_counts, dtype=np.int64),
                        indptrs=indptrs, cols=cols)


def _input_names(num_layers: int) -> list[str]:
    from trainer.export import onnx_input_names

    return onnx_input_names(num_layers)


def write_subgraph(out_dir: str | Path, batch: SampledBatch, features: np.ndarray, node_ids: np.ndarray,
                   labels: np.ndarray, extra: dict[str, Any] | None = None, stem: str = "subgraph") -> Path:
    """Write ``<stem>.json`` + ``<stem>.bin`` for ``batch`` (``features`` (num_nodes, F) in its node order,
    ``node_ids`` (num_nodes,), ``labels`` (num_seeds,)); ``extra`` adds header fields. Returns the JSON path."""
    num_nodes, num_seeds = int(batch.hop_counts[-1]), batch.num_seeds
    features = np.ascontiguousarray(features, dtype="<f4")
    if features.ndim != 2 or features.shape[0] != num_nodes:
        raise ValueError(f"'features' expected shape ({num_nodes}, F) (got {features.shape})")
    if np.shape(node_ids) != (num_nodes,) or np.shape(labels) != (num_seeds,):
        raise ValueError(f"'node_ids' / 'labels' expected shapes ({num_nodes},) / ({num_seeds},) "
                         f"(got {np.shape(node_ids)} / {np.shape(labels)})")
    arrays: dict[str, np.ndarray] = {"x": features}
    layers = []
    for i, block in enumerate(batch.blocks()):  # input layer first
        degree = np.diff(block.indptr)
        arrays[f"edge_src_{i}"] = np.asarray(block.cols, dtype="<i8")
        arrays[f"edge_dst_{i}"] = np.repeat(np.arange(block.num_dst, dtype="<i8"), degree)
        arrays[f"dst_pos_{i}"] = np.arange(block.num_dst, dtype="<i8")
        layers.append({"num_src": block.num_src, "num_dst": block.num_dst, "num_edges": int(len(block.cols))})
    arrays["node_ids"] = np.asarray(node_ids, dtype="<i8")
    arrays["labels"] = np.asarray(labels, dtype="<i8")
    table: dict[str, dict[str, Any]] = {}
    out_dir = Path(out_dir)
    bin_path = out_dir / f"{stem}.bin"
    digest, size = hashlib.sha256(), 0
    with open(bin_path, "wb") as f:  # array by array: no copy of the whole file in memory (wide features)
        for name, arr in arrays.items():
            pad = b"\0" * (-size % _ALIGN)
            table[name] = {"dtype": "float32" if arr.dtype.kind == "f" else "int64", "shape": list(arr.shape),
                           "offset": size + len(pad), "nbytes": arr.nbytes}
            for chunk in (pad, memoryview(np.ascontiguousarray(arr)).cast("B")):
                f.write(chunk)
                digest.update(chunk)
            size += len(pad) + arr.nbytes
    header = {
        "format": SUBGRAPH_FORMAT, "format_version": 1, "byte_order": "little",
        "num_layers": batch.num_layers, "num_seeds": num_seeds, "num_nodes": num_nodes,
        "feature_dim": int(features.shape[1]), "layers": layers, "inputs": _input_names(batch.num_layers),
        "data": {"file": bin_path.name, "bytes": size, "sha256": digest.hexdigest()},
        "arrays": table, **(extra or {}),
    }
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(header, indent=2) + "\n")
    return json_path


def read_subgraph(json_path: str | Path) -> Subgraph:
    """Read (and check) a subgraph written by :func:`write_subgraph`."""
    json_path = Path(json_path)
    header = json.loads(json_path.read_text())
    if header.get("format") != SUBGRAPH_FORMAT or header.get("format_version") != 1:
        raise ValueError(f"'{json_path}' expected format {SUBGRAPH_FORMAT!r} version 1 "
                         f"(got {header.get('format')!r} version {header.get('format_version')!r})")
    blob = (json_path.parent / header["data"]["file"]).read_bytes()
    if hashlib.sha256(blob).hexdigest() != header["data"]["sha256"]:
        raise ValueError(f"'{json_path.parent / header['data']['file']}' expected sha256 {header['data']['sha256']} "
                         "(got another)")
    arrays = {}
    for name, spec in header["arrays"].items():
        dtype = {"float32": "<f4", "int64": "<i8"}[spec["dtype"]]
        raw = blob[spec["offset"]: spec["offset"] + spec["nbytes"]]
        arrays[name] = np.frombuffer(raw, dtype=dtype).reshape(spec["shape"])
    return Subgraph(header, arrays)

