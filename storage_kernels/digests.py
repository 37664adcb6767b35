"""Digests written into a manifest at publish: the manifest's own digest and the sampled block digests of its
files (``manifest["integrity"]``).

:class:`~storage_kernels.builder.ArtifactBuilder` records them; :mod:`storage_kernels.integrity` compares them
on reuse (``sampled`` mode and the manifest check). The whole-file checksums are
:func:`storage_kernels.arrays.file_checksum`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["BLOCK_BYTES", "SAMPLE_BLOCKS", "block_digests", "integrity_record", "manifest_digest", "sample_offsets"]

#: Size of one sampled block.
BLOCK_BYTES = 1 << 20
#: Sampled blocks per file besides the first and the last.
SAMPLE_BLOCKS = 8

_ALGORITHM = "blake2b"
_BLOCK_DIGEST_BYTES = 16


def manifest_digest(manifest: dict[str, Any]) -> str:
    """``blake2b:<hex>`` of the canonical JSON of ``manifest`` without its ``manifest_digest`` key."""
    body = {k: v for k, v in manifest.items() if k != "manifest_digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"{_ALGORITHM}:" + hashlib.blake2b(text.encode("utf8")).hexdigest()


def sample_offsets(size: int, block: int = BLOCK_BYTES, count: int = SAMPLE_BLOCKS) -> list[int]:
    """Byte offsets of the sampled blocks of a ``size``-byte file: every block of a small file, else the first,
    the last and ``count`` evenly spaced between them (deterministic: the same size gives the same offsets)."""
    if size <= 0:
        return []
    nblocks = -(-size // block)
    if nblocks <= count + 2:
        return [i * block for i in range(nblocks)]
    picks = {0, nblocks - 1}
    picks.update(round(i * (nblocks - 1) / (count + 1)) for i in range(1, count + 1))
    return [i * block for i in sorted(picks)]


def _block_digest(f: Any, offset: int, block: int) -> str:
    f.seek(offset)
    return hashlib.blake2b(f.read(block), digest_size=_BLOCK_DIGEST_BYTES).hexdigest()


def block_digests(path: str | os.PathLike[str], block: int = BLOCK_BYTES, count: int = SAMPLE_BLOCKS
                  ) -> list[list[Any]]:
    """``[[offset, hex digest], ...]`` of the sampled blocks of ``path`` (what ``sampled`` mode re-checks)."""
    size = os.stat(path).st_size
    with open(path, "rb", buffering=0) as f:
        return [[off, _block_digest(f, off, block)] for off in sample_offsets(size, block, count)]


def integrity_record(directory: Path, names: Iterable[str]) -> dict[str, Any]:
    """The manifest's ``integrity`` entry for the files ``names`` of ``directory`` (read at publish)."""
    return {"block_bytes": BLOCK_BYTES,
            "blocks": {name: block_digests(directory / name) for name in sorted(names)}}
