"""Hostile Planetoid files: every crafted pickle or index file fails with one clear error naming the file,
before SciPy or NumPy sees an out-of-range index (a crafted ``csr_matrix`` used to crash the process with
SIGSEGV), and no error quotes the file's contents."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines.methods.sources.planetoid import planetoid_source
from tests import REPO
from tests.pipelines.planetoid_fixtures import ALLX_ROWS, DIM, TEST_ROWS, crafted_csr, write_planetoid

CLEAR = (ValueError, pickle.UnpicklingError, FileNotFoundError)


def _load(directory: Path):
    return planetoid_source(directory, "cora")


def test_the_valid_fixture_loads(tmp_path: Path) -> None:
    source = _load(write_planetoid(tmp_path))
    assert (source.num_nodes, source.feature_dim, source.num_classes) == (ALLX_ROWS + TEST_ROWS, DIM, 3)
    np.testing.assert_array_equal(source.test_idx, np.arange(ALLX_ROWS, ALLX_ROWS + TEST_ROWS))


HOSTILE = {
    # a csr_matrix whose column indices point far outside the matrix (SIGSEGV in SciPy before)
    "csr indices out of range": ("allx", crafted_csr(np.ones(3, np.float32), np.array([0, 1, 10**9]),
                                                     np.array([0, 1, 2, 3] + [3] * (ALLX_ROWS - 3)),
                                                     (ALLX_ROWS, DIM)), "indices[2]"),
    "csr negative index": ("tx", crafted_csr(np.ones(1, np.float32), np.array([-7]),
                                             np.array([0, 1] + [1] * (TEST_ROWS - 1)), (TEST_ROWS, DIM)),
                           "indices[0]"),
    "csr indptr past the data": ("allx", crafted_csr(np.ones(2, np.float32), np.array([0, 1]),
                                                     np.array([0, 5] + [9] * (ALLX_ROWS - 1)), (ALLX_ROWS, DIM)),
                                 "indptr"),
    "csr indptr too short": ("allx", crafted_csr(np.ones(2, np.float32), np.array([0, 1]), np.array([0, 2]),
                                                 (ALLX_ROWS, DIM)), "indptr of"),
    "csr shape not ints": ("allx", crafted_csr(np.ones(2, np.float32), np.array([0, 1]), np.array([0, 2]),
                                               ("a", None)), "shape"),
    "csr data of objects": ("allx", crafted_csr([1.0], np.array([0]), np.array([0, 1]), (1, DIM)), "data"),
    "graph key out of range": ("graph", {0: [1], 10**12: [2]}, "src"),
    "graph neighbour out of range": ("graph", {0: [1, 99]}, "dst"),
    "graph neighbour negative": ("graph", {0: [-3]}, "dst"),
    "graph neighbours not a list": ("graph", {0: 5}, "integer node id"),
    "graph ids not integers": ("graph", {0: ["x"]}, "integer node id"),
    "graph not a dict": ("graph", [1, 2, 3], "dict of neighbour lists"),
    "labels not numeric": ("ally", np.array([["a"] * 3] * ALLX_ROWS), "labels"),
    "labels of another width": ("ty", np.zeros((TEST_ROWS, 7), np.int32), "label columns"),
    "features of another width": ("tx", np.zeros((TEST_ROWS, DIM + 2), np.float32), "feature columns"),
    "test id past the nodes": ("test_index", "8\n9\n10\n4000000000000\n", "line 4"),
    "test id negative": ("test_index", "8\n9\n10\n-1\n", "line 4"),
    "test id inside allx": ("test_index", "8\n9\n10\n2\n", "line 4"),
    "test ids repeated": ("test_index", "8\n9\n9\n10\n", "distinct"),
    "test index not numbers": ("test_index", "root:x:0:0:root:/root:/bin/bash\n", "line 1"),
    "test index empty": ("test_index", "", "at least one"),
    "truncated pickle": ("x", b"\x80\x02cnumpy\nndarray\n", "expected a Planetoid pickle"),
    "garbage pickle": ("y", b"SECRET-CONTENT-1234\n", "malformed pickle"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_fails_clearly_naming_the_file(tmp_path: Path, case: str) -> None:
    key, obj, fragment = HOSTILE[case]
    directory = write_planetoid(tmp_path, **{key: obj})
    with pytest.raises(CLEAR) as info:
        _load(directory)
    message = str(info.value)
    assert f"ind.cora.{'test.index' if key == 'test_index' else key}" in message, message
    assert fragment in message, message
    assert "root:x:0" not in message and "SECRET" not in message  # never the file's contents
    assert "\n" not in message


def test_crafted_csr_does_not_crash_the_interpreter(tmp_path: Path) -> None:
    """In a fresh interpreter (a segfault would kill the test process): exit 0 with the clear error."""
    key, obj, _ = HOSTILE["csr indices out of range"]
    directory = write_planetoid(tmp_path, **{key: obj})
    code = ("import sys\nfrom pipelines.methods.sources.planetoid import planetoid_source\n"
            "try:\n    planetoid_source(sys.argv[1], 'cora')\nexcept ValueError as e:\n    print('clear:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(directory)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("clear: '") and "indices[2]" in proc.stdout
