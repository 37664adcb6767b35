"""Streaming CSV reads shared by the file sources (``edgelist``, ``ogb``): record batches one at a time, Arrow's
parse errors turned into the source's own ``ValueError``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

__all__ = ["csv_batches", "redacted"]


def csv_batches(path: Path, error: Callable[[pa.ArrowInvalid], Exception], **options: Any
                ) -> Iterator[pa.RecordBatch]:
    """The record batches of ``pyarrow.csv.open_csv(path, **options)``, read one at a time (memory stays one
    block); a ``pyarrow.ArrowInvalid`` raised opening or reading the file is raised as ``error(e)``."""
    try:
        reader = pacsv.open_csv(str(path), **options)
    except pa.ArrowInvalid as e:
        raise error(redacted(e)) from None  # not chained: the original quotes the row
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as e:
            raise error(redacted(e)) from None
        yield batch


def redacted(error: pa.ArrowInvalid) -> pa.ArrowInvalid:
    """Arrow's message without the file's text: parse errors end with the offending row (``Expected 2
    columns, got 1: <row>``) and conversion errors quote the value (``invalid value '<text>'``)."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    text = re.sub(r"(got \d+)\s*:.*$", r"\1", text)
    text = re.sub(r"'[^']*'", "'...'", text)
    return pa.ArrowInvalid(text)
