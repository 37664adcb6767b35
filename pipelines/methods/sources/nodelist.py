"""Edge lists with named nodes (string ids: user names, URLs): a node list numbers them, the edges are looked up.

``edgelist:FILE`` with ``nodes=NODES``: ``NODES`` lists every node's id once, in the row order of the feature,
label (and split) arrays; node ``i`` of the graph is its row ``i``. Every id is a token compared as text (an
integer column of a Parquet or ``.npy`` file is written in decimal), so ids that merely look like integers
(``007``, zip codes) work as well as names. Formats: text (``.txt`` one id per line, the whole line;
``.csv``/``.tsv`` the first column; optionally ``.gz``/``.bz2``; no header line), Parquet (column ``id``,
else the first column; string or integer) or ``.npy`` (a 1-D array of strings or integers).

Lookups are vectorised: each name's 64-bit hash (DuckDB's ``hash``) sorted once, then per chunk of edges
one hash pass, ``numpy.searchsorted`` and a comparison of the names found, so a name whose hash happens to
equal a node's is still reported unknown. Memory: the names and 16 bytes per node, plus one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipelines.methods.sources.csvstream import csv_batches
from pipelines.methods.sources.files import PARQUET_SUFFIXES, CsvLayout, load_npy

__all__ = ["NodeIndex", "named_edges", "named_split", "read_node_list", "split_ids"]

_BLOCK_BYTES = 16 << 20
_BATCH_ROWS = 1 << 20
_TEXT_DELIMITERS = {".csv": ",", ".tsv": "\t", ".txt": "\x1f"}  # .txt: the whole line (no unit separators)


def _as_names(values: pa.Array | pa.ChunkedArray, where: str) -> pa.Array:
    """``values`` as one non-null string array (integers in decimal)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_integer(values.type):
        values = values.cast(pa.string())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise ValueError(f"'{where}' expected string or integer node ids (got {values.type})")
    if values.null_count:
        row = int(np.flatnonzero(np.asarray(values.is_null()))[0])
        raise ValueError(f"'{where}[{row}]' expected a node id (got an empty value)")
    return values.cast(pa.large_string())


def _read_text(path: Path) -> pa.Array:
    suffix = next((s for s in Path(path.name.removesuffix(".gz").removesuffix(".bz2")).suffixes[-1:]), ".txt")
    batches = csv_batches(
        path, lambda e: ValueError(f"'{path}' expected one node id per line ({e})"),
        read_options=pacsv.ReadOptions(autogenerate_column_names=True, block_size=_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(delimiter=_TEXT_DELIMITERS.get(suffix, "\x1f"), ignore_empty_lines=False),
        convert_options=pacsv.ConvertOptions(column_types={"f0": pa.large_string()}, include_columns=["f0"],
                                             strings_can_be_null=False))
    chunks = [b.column(0) for b in batches]
    return pa.chunked_array(chunks, type=pa.large_string()).combine_chunks()


def read_node_list(path: str | Path) -> pa.Array:
    """The node list at ``path`` (module docstring) as a string array; errors name the file and row."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' expected a node list for 'nodes' (got no such file)")
    where = str(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = np.asarray(load_npy(path, "nodes"))
        if arr.ndim != 1 or arr.dtype.kind not in "USiu":
            raise ValueError(f"'{path}' expected a 1-D array of string or integer node ids (got shape {arr.shape}, "
                             f"dtype {arr.dtype})")
        names = _as_names(pa.array(arr.astype(str) if arr.dtype.kind == "S" else arr), where)
    elif suffix in PARQUET_SUFFIXES:
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"'{path}' expected a Parquet file ({e})") from e
        if table.num_columns == 0:
            raise ValueError(f"'{path}' expected a column of node ids (got no columns)")
        column = "id" if "id" in table.column_names else table.column_names[0]
        names = _as_names(table.column(column), f"{where}: {column}")
    else:
        names = _as_names(_read_text(path), where)
    if len(names) == 0:
        raise ValueError(f"'{path}' expected at least one node id (got none)")
    empty = np.flatnonzero(np.asarray(pc.equal(pc.utf8_length(names), 0)))
    if empty.size:
        raise ValueError(f"'{path}: row {int(empty[0])}' expected a node id (got an empty line)")
    return names


def _hash(con: object, values: pa.Array) -> np.ndarray:
    table = pa.table({"v": values})
    con.register("_strata_ids", table)  # type: ignore[attr-defined]
    try:
        return np.asarray(con.execute("SELECT hash(v) AS h FROM _strata_ids").fetchnumpy()["h"],  # type: ignore[attr-defined]
                          dtype=np.uint64)
    finally:
        con.unregister("_strata_ids")  # type: ignore[attr-defined]


class NodeIndex:
    """A node list's names -> dense ids (their rows), vectorised (module docstring)."""

    def __init__(self, names: pa.Array, where: str) -> None:
        import duckdb

        self.names, self.where = names, where
        self._con = duckdb.connect()
        hashes = _hash(self._con, names)
        self._order = np.argsort(hashes, kind="stable")
        self._sorted = hashes[self._order]
        same = np.flatnonzero(self._sorted[1:] == self._sorted[:-1])
        if same.size:
            first, second = int(self._order[same[0]]), int(self._order[same[0] + 1])
            if names[first] == names[second]:
                raise ValueError(f"'{where}: row {second}' expected a node id not listed before (got the id of "
                                 f"row {first} again)")
            raise ValueError(f"'{where}: rows {first}, {second}' expected node ids with distinct 64-bit hashes "
                             "(got a collision; rename one of the two)")

    def __len__(self) -> int:
        return len(self.names)

    def lookup(self, values: pa.Array) -> np.ndarray:
        """Dense int64 ids of ``values`` (strings or integers), ``-1`` where a value is not a node."""
        values = _as_names(values, self.where)
        hashes = _hash(self._con, values)
        pos = np.minimum(np.searchsorted(self._sorted, hashes), len(self._sorted) - 1)
        ids = np.where(self._sorted[pos] == hashes, self._order[pos], -1)
        found = np.flatnonzero(ids >= 0)
        if found.size:  # a hash equal to a node's is not yet that node
            same = np.asarray(pc.equal(self.names.take(pa.array(ids[found])), values.take(pa.array(found))))
            ids[found[~same]] = -1
        return ids


def _raw_tokens(path: Path) -> Iterator[tuple[pa.Array, pa.Array]]:
    """The ``src``/``dst`` columns of an edge file as text, every data row (a header line included)."""
    if path.suffix.lower() in PARQUET_SUFFIXES:
        try:
            handle = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"'{path}' expected a Parquet file ({e})") from e
        names = handle.schema_arrow.names
        if "src" not in names or "dst" not in names:
            raise ValueError(f"'{path}' expected columns 'src' and 'dst' (got columns {names})")
        for batch in handle.iter_batches(batch_size=_BATCH_ROWS, columns=["src", "dst"]):
            yield batch.column(0), batch.column(1)
        return
    layout = CsvLayout(path)
    comments = layout.skip_rows - int(layout.has_header)  # the first data line may be a header: decided by lookup
    names = ["src", "dst"] + [f"c{i}" for i in range(2, layout.num_columns)]
    for batch in csv_batches(
        path, lambda e: ValueError(f"'{path}' expected two columns of node ids ({e})"),
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=comments, block_size=_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(delimiter=layout.delimiter),
        convert_options=pacsv.ConvertOptions(column_types={"src": pa.large_string(), "dst": pa.large_string()},
                                             include_columns=["src", "dst"], strings_can_be_null=False),
    ):
        yield batch.column(0), batch.column(1)


def named_edges(path: Path, index: NodeIndex) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(src, dst)`` dense int64 ids of every edge of ``path``, looked up in ``index``. The first line of a
    text file is a header when neither of its ids is a node; any other unknown id is an error naming the
    file, column and row (the row counts data rows, a header excluded)."""
    row = 0
    first = path.suffix.lower() not in PARQUET_SUFFIXES
    for src_names, dst_names in _raw_tokens(path):
        src, dst = index.lookup(src_names), index.lookup(dst_names)
        if first and len(src):
            first = False
            if src[0] < 0 and dst[0] < 0:  # a header line: `source,target`
                src, dst = src[1:], dst[1:]
        for name, ids in (("src", src), ("dst", dst)):
            if ids.size and ids.min() < 0:
                bad = int(np.flatnonzero(ids < 0)[0])
                raise ValueError(f"'{path}: {name}[{row + bad}]' expected a node id listed in '{index.where}' "
                                 "(got an id not in it)")
        row += len(src)
        yield src, dst


def named_split(values: np.ndarray, index: NodeIndex, where: str) -> np.ndarray:
    """A split file of node ids (strings) as dense ids; unknown ids are an error naming the file and index."""
    ids = index.lookup(pa.array(values.astype(str) if values.dtype.kind == "S" else values))
    if ids.size and ids.min() < 0:
        bad = int(np.flatnonzero(ids < 0)[0])
        raise ValueError(f"'{where}[{bad}]' expected a node id listed in '{index.where}' (got an id not in it)")
    return ids


def split_ids(values: np.ndarray, index: NodeIndex | None, where: str) -> np.ndarray:
    """A split file's node ids: rows (integers), or with a node list also the nodes' own ids (strings)."""
    values = np.asarray(values)
    if index is not None and values.dtype.kind in "US":
        return named_split(values, index, where)
    return values
