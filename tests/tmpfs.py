"""A small tmpfs mounted for one test (root only): where a test needs a disk that fills up."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (e.g. ``"1m"``) at the existing directory ``mount``, unmount it at the end;
    the test is skipped where that cannot be done (not root, no ``mount``)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.contextmanager
def mounted_ext4(mount: Path, size: str) -> Iterator[Path]:
    """Mount a fresh ext4 image of ``size`` (e.g. ``"16M"``) at ``mount`` through a loop device, unmount and
    remove it at the end: where a test needs a disk filesystem's behaviour (a failed ``fallocate`` keeps the
    extents it got on ext4; tmpfs gives them back). Skipped where that cannot be done."""
    if os.geteuid() != 0 or not (shutil.which("mkfs.ext4") and shutil.which("mount")):
        pytest.skip("mounting an ext4 image needs root and mkfs.ext4")
    image = mount.parent / f"{mount.name}.img"
    with open(image, "wb") as f:
        f.truncate(_bytes(size))
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    if made.returncode == 0:
        made = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if made.returncode != 0:
        image.unlink(missing_ok=True)
        pytest.skip(f"cannot mount an ext4 image here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        image.unlink(missing_ok=True)


def _bytes(size: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].lower() in units else int(size)
