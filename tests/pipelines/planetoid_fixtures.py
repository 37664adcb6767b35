"""A small valid Planetoid directory written with real pickles, and ways to corrupt one file of it.

``write_planetoid(dir, name, **overrides)`` writes ``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``;
an override replaces the object pickled for one key (``"test.index"``: the file's text). A crafted
``csr_matrix`` keeps whatever arrays it is given (its ``__dict__`` is what a pickle restores), which is how a
hostile file reaches SciPy with out-of-range indices.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["ALLX_ROWS", "DIM", "TEST_ROWS", "crafted_csr", "valid_objects", "write_planetoid"]

ALLX_ROWS, TEST_ROWS, DIM, CLASSES = 8, 4, 5, 3


def _onehot(rows: int, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros((rows, CLASSES), dtype=np.int32)
    out[np.arange(rows), rng.integers(0, CLASSES, rows)] = 1
    return out


def valid_objects(seed: int = 0) -> dict[str, Any]:
    """The objects of a consistent 12-node graph (8 allx rows, 4 test rows, 3 labelled train rows)."""
    rng = np.random.default_rng(seed)
    allx = sp.csr_matrix(rng.integers(0, 2, (ALLX_ROWS, DIM)).astype(np.float32))
    tx = sp.csr_matrix(rng.integers(0, 2, (TEST_ROWS, DIM)).astype(np.float32))
    ally, ty = _onehot(ALLX_ROWS, rng), _onehot(TEST_ROWS, rng)
    n = ALLX_ROWS + TEST_ROWS
    graph = defaultdict(list, {i: [int((i + 1) % n), int((i + 5) % n)] for i in range(n)})
    test_index = "\n".join(str(i) for i in rng.permutation(np.arange(ALLX_ROWS, n))) + "\n"
    return {"x": allx[:3], "tx": tx, "allx": allx, "y": ally[:3], "ty": ty, "ally": ally, "graph": graph,
            "test.index": test_index}


def crafted_csr(data: Any, indices: Any, indptr: Any, shape: Any) -> sp.csr_matrix:
    """A ``csr_matrix`` holding exactly these attributes, unchecked (as a pickle would restore them)."""
    m = sp.csr_matrix((1, 1), dtype=np.float32)
    m.__dict__.update({"data": data, "indices": indices, "indptr": indptr, "_shape": shape})
    return m


def write_planetoid(directory: Path, name: str = "cora", protocol: int = 3, **overrides: Any) -> Path:
    """Write the files as pickles of ``protocol`` (``test_index=...`` overrides ``test.index``); returns the dir."""
    directory.mkdir(parents=True, exist_ok=True)
    objects = valid_objects()
    objects.update({("test.index" if k == "test_index" else k): v for k, v in overrides.items()})
    for key, obj in objects.items():
        path = directory / f"ind.{name}.{key}"
        if key == "test.index":
            path.write_bytes(obj if isinstance(obj, bytes) else str(obj).encode())
        else:
            path.write_bytes(obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=protocol))
    return directory
