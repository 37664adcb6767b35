"""Reading a source's own files: ``.npy`` arrays, edge lists (CSV/TSV/text, optionally compressed, or Parquet),
and the seeded random split used when a source gives none. Shared by ``edgelist:`` (one file) and its
directory form (:mod:`pipelines.methods.sources.edgedir`), and by ``ogb:``'s link datasets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipelines.methods.sources.csvstream import csv_batches

__all__ = ["PARQUET_SUFFIXES", "RANDOM_SPLIT", "STRING_IDS_HINT", "CsvLayout", "load_npy", "parquet_file",
           "random_split", "raw_edges"]

PARQUET_SUFFIXES = (".parquet", ".pq")
RANDOM_SPLIT = (0.6, 0.2, 0.2)
"""Train / val / test fractions of the labelled nodes when no split files are given."""
#: What an error about a non-integer id adds: how to read named nodes.
STRING_IDS_HINT = ("ids that are not integers (user names, URLs) need a node list: edgelist:FILE with "
                   "--set ingest.options.nodes=NODES.txt, one id per line in the row order of features and labels")
_BLOCK_BYTES = 16 << 20
_BATCH_ROWS = 1 << 20


def load_npy(path: str | Path, role: str) -> np.ndarray:
    """Memory-map a ``.npy`` file without pickles.

    Raises:
        FileNotFoundError: missing file (the message names the role, e.g. ``features``).
        ValueError: not a readable ``.npy`` array or an object array.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' expected a .npy file for '{role}' (got no such file)")
    # NumPy's messages quote the file's first bytes: name the problem, never the contents
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        what = "Python objects" if "allow_pickle" in str(e) else "a malformed .npy header"
        raise ValueError(f"'{path}' expected a .npy array without Python objects for '{role}' "
                         f"(got {what})") from None
    except (OSError, EOFError) as e:
        raise ValueError(f"'{path}' expected a .npy array for '{role}' (got {type(e).__name__})") from None


def random_split(
    labels: np.ndarray, seed: int, fractions: tuple[float, float, float] = RANDOM_SPLIT
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded random (train, val, test) over the labelled nodes, each sorted int64."""
    labelled = np.flatnonzero(np.asarray(labels) >= 0).astype(np.int64)
    order = np.random.default_rng(seed).permutation(labelled)
    n_train = int(len(order) * fractions[0])
    n_val = int(len(order) * fractions[1])
    n_test = min(len(order) - n_train - n_val, int(round(len(order) * fractions[2])))
    parts = (
        order[:n_train],
        order[n_train : n_train + n_val],
        order[n_train + n_val : n_train + n_val + n_test],
    )
    return tuple(np.sort(p) for p in parts)


class CsvLayout:
    """What the head of an edge CSV says: delimiter, lines to skip, column count."""

    def __init__(self, path: Path) -> None:
        with pa.input_stream(str(path), compression="detect") as stream:
            head = stream.read(1 << 20).decode("utf-8", errors="replace")
        lines = head.splitlines()
        skip = 0
        while skip < len(lines) and (not lines[skip].strip() or lines[skip].lstrip()[:1] in ("#", "%")):
            skip += 1
        if skip == len(lines):
            raise ValueError(f"'{path}' expected lines of two integer columns (got no data line)")
        first = lines[skip].strip()
        self.delimiter = "," if "," in first else "\t" if "\t" in first else " "
        fields = first.split(self.delimiter)
        if len(fields) < 2:
            raise ValueError(f"'{path}: line {skip + 1}' expected two integer columns (got {len(fields)})")
        self.has_header = not all(_is_int(f) for f in fields[:2])
        self.skip_rows = skip + int(self.has_header)
        self.num_columns = len(fields)


def _is_int(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True


def _csv_edges(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    layout = CsvLayout(path)
    names = ["src", "dst"] + [f"c{i}" for i in range(2, layout.num_columns)]
    batches = csv_batches(
        path,
        lambda e: ValueError(f"'{path}' expected two integer columns ({e}); {STRING_IDS_HINT}"),
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=layout.skip_rows, block_size=_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(delimiter=layout.delimiter),
        convert_options=pacsv.ConvertOptions(
            column_types={"src": pa.int64(), "dst": pa.int64()}, include_columns=["src", "dst"]
        ),
    )
    for batch in batches:
        yield _batch_to_numpy(batch, path)


def parquet_file(path: Path) -> pq.ParquetFile:
    """Open a Parquet edge file and check it has integer ``src`` and ``dst`` columns."""
    try:
        handle = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"'{path}' expected a Parquet file ({e})") from e
    names = handle.schema_arrow.names
    missing = [c for c in ("src", "dst") if c not in names]
    if missing:
        raise ValueError(f"'{path}' expected integer columns 'src' and 'dst' (got columns {names})")
    for c in ("src", "dst"):
        kind = handle.schema_arrow.field(c).type
        if not pa.types.is_integer(kind):
            raise ValueError(f"'{path}: {c}' expected an integer column (got {kind}); {STRING_IDS_HINT}")
    return handle


def _parquet_edges(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    handle = parquet_file(path)
    for batch in handle.iter_batches(batch_size=_BATCH_ROWS, columns=["src", "dst"]):
        yield _batch_to_numpy(batch, path)


def _batch_to_numpy(batch: pa.RecordBatch, path: Path) -> tuple[np.ndarray, np.ndarray]:
    for i, name in enumerate(("src", "dst")):
        if batch.column(i).null_count:
            raise ValueError(
                f"'{path}: {name}' expected integer ids on every row (got {batch.column(i).null_count} empty)"
            )
    return (
        np.asarray(batch.column(0).to_numpy(), dtype=np.int64),
        np.asarray(batch.column(1).to_numpy(), dtype=np.int64),
    )


def raw_edges(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    return _parquet_edges(path) if path.suffix.lower() in PARQUET_SUFFIXES else _csv_edges(path)
