"""Streaming CSV reads shared by the file sources (``edgelist``, ``ogb``): record batches one at a time, Arrow's
parse errors turned into the source's own ``ValueError``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

__all__ = ["csv_batches"]


def csv_batches(path: Path, error: Callable[[pa.ArrowInvalid], Exception], **options: Any
                ) -> Iterator[pa.RecordBatch]:
    """The record batches of ``pyarrow.csv.open_csv(path, **options)``, read one at a time (memory stays one
    block); a ``pyarrow.ArrowInvalid`` raised opening or reading the file is raised as ``error(e)``."""
    try:
        reader = pacsv.open_csv(str(path), **options)
    except pa.ArrowInvalid as e:
        raise error(e) from e
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as e:
            raise error(e) from e
        yield batch
