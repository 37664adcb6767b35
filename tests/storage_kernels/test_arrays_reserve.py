"""Writable memory maps reserve their blocks: a full disk is an ``OSError`` (ENOSPC) at allocation naming the file,
not a ``SIGBUS`` (exit 135) at the first write into a page the disk has no block for.

The full-disk cases mount a small tmpfs (root with CAP_SYS_ADMIN; skipped elsewhere) and fill the map in a child
process, so that a regression shows as the child's signal rather than killing pytest.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.arrays import DATA_ALIGN, ArrayWriter, reserve_space
from storage_kernels.store import ArtifactStore
from tests.tmpfs import mounted_ext4, mounted_tmpfs

MIB = 1 << 20


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own, unmounted at the end."""
    mount = tmp_path / "fs"
    mount.mkdir()
    with mounted_tmpfs(mount, "1m"):
        yield mount


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _in_child(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get(
        "PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_allocate_reserves_every_block_of_the_file(tmp_path: Path) -> None:
    with open(tmp_path / "probe", "wb") as f:
        if not reserve_space(f.fileno(), DATA_ALIGN, tmp_path / "probe"):
            pytest.skip("this filesystem cannot reserve blocks")
    mm = ArrayWriter.allocate(tmp_path / "a.npy", np.int64, (MIB // 8,))
    st = os.stat(tmp_path / "a.npy")
    assert st.st_size == DATA_ALIGN + MIB
    assert st.st_blocks * 512 >= st.st_size  # not sparse: the blocks are the file's before any page is written
    assert not mm.any()  # still reads as zeros
    mm[:] = 7
    mm.flush()
    del mm
    assert (np.load(tmp_path / "a.npy") == 7).all()


def test_allocate_on_a_full_disk_raises_enospc_naming_the_file_and_leaves_nothing(small_fs: Path) -> None:
    done = _in_child(f"""
        import errno, os
        import numpy as np
        from storage_kernels.arrays import ArrayWriter
        path = {str(small_fs / 'big.npy')!r}
        try:
            mm = ArrayWriter.allocate(path, np.int64, (4 << 20 >> 3,))  # 4 MiB on a 1 MiB filesystem
        except OSError as e:
            print(errno.errorcode[e.errno], e.filename, os.path.exists(path))
        else:
            mm[:] = 1  # without the reservation: SIGBUS at the first page past the free space
            print("filled")
    """)
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7: killed by SIGBUS
    assert done.stdout.split() == ["ENOSPC", str(small_fs / "big.npy"), "False"]
    assert _used(small_fs) < 64 << 10  # the blocks reserved before the failure were given back


def test_an_array_that_fits_is_allocated_and_filled(small_fs: Path) -> None:
    mm = ArrayWriter.allocate(small_fs / "fits.npy", np.float32, (512 << 10 >> 2,))
    mm[:] = 1.5
    mm.flush()
    del mm
    assert (np.load(small_fs / "fits.npy") == 1.5).all()


def test_the_builder_refuses_a_memory_mapped_array_the_disk_cannot_hold(small_fs: Path) -> None:
    store = ArtifactStore(small_fs / "root")
    with pytest.raises(OSError) as caught, store.builder("d", "s", "0" * 12, {}, {}) as b:
        b.allocate_array("indices", np.int64, (4 << 20 >> 3,))
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename is not None and caught.value.filename.endswith("indices.npy")
    assert not any((small_fs / "root" / ".tmp").iterdir())  # the build's temp dir went with it


def test_a_filesystem_that_cannot_reserve_keeps_the_sparse_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """NFS before 4.2 and some FUSE filesystems refuse fallocate; glibc usually emulates it, but where the
    refusal reaches us the array is allocated as before (sparse), not refused."""
    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "posix_fallocate", refuse)
    with open(tmp_path / "probe", "wb") as f:
        assert reserve_space(f.fileno(), MIB, tmp_path / "probe") is False
    mm = ArrayWriter.allocate(tmp_path / "a.npy", np.int32, (1000,))
    assert os.path.getsize(tmp_path / "a.npy") == 2 * DATA_ALIGN
    mm[:] = np.arange(1000)
    mm.flush()
    del mm
    assert (np.load(tmp_path / "a.npy") == np.arange(1000)).all()


def test_reserving_nothing_is_a_no_op(tmp_path: Path) -> None:
    with open(tmp_path / "empty", "wb") as f:
        assert reserve_space(f.fileno(), 0, tmp_path / "empty") is True
    assert os.path.getsize(tmp_path / "empty") == 0
    mm = ArrayWriter.allocate(tmp_path / "none.npy", np.int64, (0,))
    assert mm.shape == (0,)


def test_a_capacity_the_disk_cannot_hold_fails_at_once_and_frees_the_disk(small_fs: Path) -> None:
    # 4 MiB of rows on a 1 MiB disk: ENOSPC naming the file when the writer is made, not at some later append,
    # and the extents the failed preallocation took are given back with the file
    before = _used(small_fs)
    with pytest.raises(OSError) as caught:
        ArrayWriter(small_fs / "big.npy", "float32", 1024, capacity=1024)
    assert caught.value.errno == errno.ENOSPC and "big.npy" in str(caught.value)
    assert not (small_fs / "big.npy").exists() and _used(small_fs) == before
    with ArrayWriter(small_fs / "fits.npy", "float32", 16, capacity=1024) as w:  # 64 KiB: preallocated, written
        w.append(np.ones((1024, 16), dtype=np.float32))
    assert np.load(small_fs / "fits.npy").sum() == 1024 * 16


def test_a_failed_reservation_gives_its_extents_back(tmp_path: Path) -> None:
    # on ext4 (not tmpfs) a posix_fallocate that runs out of space keeps what it got and grows the file: a
    # caller that keeps its file gets its size and its disk back
    mount = tmp_path / "ext4"
    mount.mkdir()
    with mounted_ext4(mount, "16M"), open(mount / "kept", "wb") as f:
        f.write(b"x" * DATA_ALIGN)
        f.flush()
        os.fsync(f.fileno())  # its block allocated now (ext4 allocates at writeback)
        with_header = _used(mount)
        with pytest.raises(OSError, match="kept") as caught:
            reserve_space(f.fileno(), 64 * MIB, mount / "kept")
        assert caught.value.errno == errno.ENOSPC
        # a metadata block or so may stay (the journal's): not the megabytes the failed call had taken
        assert os.fstat(f.fileno()).st_size == DATA_ALIGN and _used(mount) - with_header < 64 << 10
