"""Reading OGB's raw CSV files, block by block with ``pyarrow.csv``: finding ``name.csv(.gz)``, one column read
whole, edges and feature rows streamed and checked. Shared by ``ogb:`` node datasets and their link-prediction
form (:mod:`pipelines.methods.sources.ogbl`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from pipelines.methods.sources.csvstream import csv_batches
from pipelines.methods.sources.edges import EdgeChunk, symmetrise_chunk
from pipelines.methods.sources.validate import check_edge_chunk, check_feature_chunk

__all__ = ["DEFAULT_BLOCK_BYTES", "csv_edge_chunks", "csv_feature_chunks", "find_csv", "first_line",
           "read_csv_column"]

DEFAULT_BLOCK_BYTES = 16 << 20
"""Bytes of CSV text per streamed block."""


def find_csv(directory: Path, stem: str) -> Path:
    """``directory/stem.csv.gz`` or ``directory/stem.csv``, whichever exists.

    Raises:
        FileNotFoundError: neither exists; the message names both.
    """
    for suffix in (".csv.gz", ".csv"):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"'{directory / stem}.csv(.gz)' expected an OGB CSV file (got no such file in '{directory}')"
    )


def first_line(path: Path) -> str:
    with pa.input_stream(str(path), compression="detect") as stream:
        head = stream.read(1 << 20)
    return head.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()


def _csv_error(path: Path, columns: int, block_bytes: int, error: Exception) -> ValueError:
    hint = f"; a line longer than block_bytes={block_bytes} also fails" if "straddl" in str(error) else ""
    return ValueError(f"'{path}' expected {columns} numeric comma-separated columns per line ({error}{hint})")


def _batches(path: Path, column_types: dict[str, pa.DataType], block_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches of a headerless CSV with the given columns and types."""
    return csv_batches(
        path,
        lambda e: _csv_error(path, len(column_types), block_bytes, e),
        read_options=pacsv.ReadOptions(column_names=list(column_types), block_size=block_bytes),
        convert_options=pacsv.ConvertOptions(column_types=column_types, strings_can_be_null=False),
    )


def read_csv_column(path: Path, dtype: pa.DataType, block_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """A whole one-column headerless CSV as a NumPy array (nulls become NaN for float types)."""
    parts = [b.column(0).to_numpy(zero_copy_only=False) for b in _batches(path, {"v": dtype}, block_bytes)]
    return (
        np.concatenate(parts)
        if parts
        else np.empty(0, dtype=np.float64 if pa.types.is_floating(dtype) else np.int64)
    )


def csv_edge_chunks(path: Path, num_nodes: int, undirected: bool, block_bytes: int) -> Iterator[EdgeChunk]:
    row = 0
    for batch in _batches(path, {"src": pa.int64(), "dst": pa.int64()}, block_bytes):
        if batch.column(0).null_count or batch.column(1).null_count:
            column = 0 if batch.column(0).null_count else 1
            bad = int(np.flatnonzero(batch.column(column).is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(
                f"'{path}: {('src', 'dst')[column]}[{row + bad}]' expected an integer id (got empty)"
            )
        src, dst = check_edge_chunk(
            batch.column(0).to_numpy(), batch.column(1).to_numpy(), num_nodes, str(path), row
        )
        row += len(src)
        yield symmetrise_chunk(src, dst) if undirected else _directed(src, dst)


def _directed(src: np.ndarray, dst: np.ndarray) -> EdgeChunk:
    """A directed edge ``u -> v`` becomes CSR entry ``(v, u)`` (row v aggregates u); loops dropped."""
    keep = src != dst
    return dst[keep], src[keep]


def csv_feature_chunks(path: Path, dim: int, block_bytes: int) -> Iterator[np.ndarray]:
    types = {f"f{i}": pa.float32() for i in range(dim)}
    row = 0
    for batch in _batches(path, types, block_bytes):
        chunk = np.empty((batch.num_rows, dim), dtype=np.float32)
        for i, column in enumerate(batch.columns):
            chunk[:, i] = column.to_numpy(zero_copy_only=False)  # nulls -> NaN, caught below
        yield check_feature_chunk(chunk, dim, str(path), row)
        row += batch.num_rows
