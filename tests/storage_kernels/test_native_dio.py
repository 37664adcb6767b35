"""open_direct / pread_ranges / aligned_empty / close_fd: direct and buffered paths, invalid inputs.

Both /work and /tmp (ext4) accept O_DIRECT on the development machines; the buffered path is covered by
passing direct=False, and the EINVAL fallback of open_direct by a subprocess with an LD_PRELOAD shim that
refuses O_DIRECT (skipped when no C compiler is available).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import pread_ranges_ref

ALIGN = kernels.DIRECT_ALIGN
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "data.bin"
    payload = np.random.default_rng(0).integers(0, 256, 64 * ALIGN, dtype=np.uint8).tobytes()
    path.write_bytes(payload)
    return path


@pytest.fixture
def direct_fd(data_file):
    fd, direct = kernels.open_direct(data_file)
    yield fd, direct
    kernels.close_fd(fd)


# ---- the alignment constant ------------------------------------------------------------------------------


def test_direct_align_is_the_file_format_alignment():
    """C defines the alignment once (SK_DIRECT_ALIGN); it must be the file format's, arrays.DATA_ALIGN."""
    from storage_kernels import _native, arrays

    assert _native.DIRECT_ALIGN == arrays.DATA_ALIGN
    assert kernels.DIRECT_ALIGN == arrays.DATA_ALIGN
    assert kernels.aligned_empty(1).ctypes.data % arrays.DATA_ALIGN == 0  # the native default alignment
    assert _native.aligned_empty(1).ctypes.data % arrays.DATA_ALIGN == 0


# ---- aligned_empty ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [0, 1, 4095, 4096, 1 << 20])
@pytest.mark.parametrize("alignment", [1, 64, 4096, 1 << 16])
def test_aligned_empty(nbytes, alignment):
    buf = kernels.aligned_empty(nbytes, alignment)
    assert buf.dtype == np.uint8 and buf.shape == (nbytes,) and buf.flags.writeable and buf.flags.c_contiguous
    assert buf.ctypes.data % alignment == 0
    buf[:] = 7  # the memory is ours to write
    assert buf.sum() == 7 * nbytes


def test_aligned_empty_value_errors():
    with pytest.raises(ValueError, match=r"'alignment' expected a power of two \(got 3000\)"):
        kernels.aligned_empty(10, 3000)
    with pytest.raises(ValueError, match=r"'nbytes' expected >= 0 \(got -1\)"):
        kernels.aligned_empty(-1)


# ---- reads -----------------------------------------------------------------------------------------------


def test_direct_reads_match_reference(data_file, direct_fd):
    fd, direct = direct_fd
    assert isinstance(direct, bool)
    rng = np.random.default_rng(1)
    blocks = rng.choice(60, 12, replace=False)
    offsets = blocks * ALIGN
    lengths = rng.integers(1, 5, 12) * ALIGN
    out_offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = kernels.aligned_empty(int(lengths.sum()))
    for threads in (1, 4):
        out[:] = 0
        got = kernels.pread_ranges(fd, offsets, lengths, out, out_offsets, direct=direct, num_threads=threads)
        assert got == lengths.sum()
        for k, want in enumerate(pread_ranges_ref(data_file, offsets, lengths)):
            assert out[out_offsets[k] : out_offsets[k] + lengths[k]].tobytes() == want


def test_buffered_reads_any_alignment(data_file):
    fd, _ = kernels.open_direct(data_file)
    kernels.close_fd(fd)
    fd = os.open(data_file, os.O_RDONLY)
    try:
        offsets, lengths = np.array([1, 5000, 77, 0]), np.array([10, 3, 4096 * 3 + 1, 0])
        out = np.zeros(20_000, dtype=np.uint8)
        out_offsets = np.array([3, 100, 200, 19_999])
        assert kernels.pread_ranges(fd, offsets, lengths, out, out_offsets, direct=False) == lengths.sum()
        for k, want in enumerate(pread_ranges_ref(data_file, offsets, lengths)):
            assert out[out_offsets[k] : out_offsets[k] + lengths[k]].tobytes() == want
        assert out[:3].sum() == 0  # nothing outside the ranges is written
    finally:
        os.close(fd)


def test_into_2d_buffer(data_file, direct_fd):
    fd, direct = direct_fd
    out = kernels.aligned_empty(2 * ALIGN).reshape(2, ALIGN)
    kernels.pread_ranges(fd, [ALIGN, 0], [ALIGN, ALIGN], out, [0, ALIGN], direct)
    want = data_file.read_bytes()
    assert out[0].tobytes() == want[ALIGN : 2 * ALIGN] and out[1].tobytes() == want[:ALIGN]


def test_open_for_write_creates(tmp_path):
    path = tmp_path / "new.bin"
    fd, _ = kernels.open_direct(path, write=True)
    try:
        os.pwrite(fd, kernels.aligned_empty(ALIGN), 0)  # aligned source: O_DIRECT write
    finally:
        kernels.close_fd(fd)
    assert path.stat().st_size == ALIGN


def test_fallback_when_filesystem_refuses_direct(tmp_path, data_file):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the O_DIRECT-refusing shim")
    shim = tmp_path / "nodirect.c"
    shim.write_text(
        textwrap.dedent(
            """
            #define _GNU_SOURCE
            #include <dlfcn.h>
            #include <errno.h>
            #include <fcntl.h>
            #include <stdarg.h>
            #define SHIM(name)                                                          \\
                int name(const char *path, int flags, ...) {                            \\
                    va_list ap; va_start(ap, flags); int mode = va_arg(ap, int); va_end(ap); \\
                    if (flags & O_DIRECT) { errno = EINVAL; return -1; }               \\
                    int (*real)(const char *, int, ...) = dlsym(RTLD_NEXT, #name);      \\
                    return real(path, flags, mode);                                     \\
                }
            SHIM(open)
            SHIM(open64)
            """
        )
    )
    lib = tmp_path / "nodirect.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(shim), "-ldl"], check=True, capture_output=True)
    script = textwrap.dedent(
        f"""
        import numpy as np
        from storage_kernels import kernels
        fd, direct = kernels.open_direct({str(data_file)!r})
        out = np.zeros(100, np.uint8)
        n = kernels.pread_ranges(fd, [3], [100], out, [0], direct)
        kernels.close_fd(fd)
        print(direct, n, out.tobytes() == open({str(data_file)!r}, "rb").read()[3:103])
        """
    )
    # after any preload already there: under `make test-asan` the ASan runtime must stay first
    env = dict(os.environ, LD_PRELOAD=":".join(filter(None, [os.environ.get("LD_PRELOAD"), str(lib)])))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "100", "True"]


# ---- invalid inputs --------------------------------------------------------------------------------------


def test_misaligned_direct_value_errors(direct_fd):
    fd, _ = direct_fd
    out = kernels.aligned_empty(4 * ALIGN)
    with pytest.raises(ValueError, match=r"direct range 1 expected .* aligned to 4096 .*offsets\[1\]=100"):
        kernels.pread_ranges(fd, [0, 100], [ALIGN, ALIGN], out, [0, ALIGN], direct=True)
    with pytest.raises(ValueError, match=r"lengths\[0\]=100"):
        kernels.pread_ranges(fd, [0], [100], out, [0], direct=True)
    with pytest.raises(ValueError, match=r"destination address % 4096 = 8"):
        kernels.pread_ranges(fd, [0], [ALIGN], out, [8], direct=True)


def test_range_value_errors(direct_fd):
    fd, _ = direct_fd
    out = kernels.aligned_empty(ALIGN)
    with pytest.raises(ValueError, match=r"out_offsets\[k\] \+ lengths\[k\] <= out.nbytes=4096 \(got 4096 \+ 4096\)"):
        kernels.pread_ranges(fd, [0], [ALIGN], out, [ALIGN], direct=False)
    with pytest.raises(ValueError, match=r"non-negative .*offsets\[0\]=-4096"):
        kernels.pread_ranges(fd, [-ALIGN], [ALIGN], out, [0], direct=False)
    with pytest.raises(ValueError, match="expected the length of 'offsets'"):
        kernels.pread_ranges(fd, [0, 0], [ALIGN], out, [0], direct=False)
    with pytest.raises(ValueError, match="'out' expected a writable C-contiguous uint8"):
        kernels.pread_ranges(fd, [0], [4], np.zeros(4, np.int8), [0], direct=False)
    with pytest.raises(ValueError, match="'fd' expected a descriptor >= 0"):
        kernels.pread_ranges(-1, [0], [4], out, [0], direct=False)


def test_read_past_eof_os_error(direct_fd):
    fd, direct = direct_fd
    out = kernels.aligned_empty(2 * ALIGN)
    with pytest.raises(
        OSError, match=r"expected 8192 bytes at offset 258048 \(range 0\) \(got 4096 before end of file\)"
    ):
        kernels.pread_ranges(fd, [63 * ALIGN], [2 * ALIGN], out, [0], direct)


def test_bad_fd_os_error(data_file):
    fd, direct = kernels.open_direct(data_file)
    kernels.close_fd(fd)
    out = kernels.aligned_empty(ALIGN)
    with pytest.raises(OSError, match=f"reading fd {fd} at offset 0") as info:
        kernels.pread_ranges(fd, [0], [ALIGN], out, [0], direct)
    assert info.value.errno == 9  # EBADF
    with pytest.raises(OSError):
        kernels.close_fd(fd)


def test_missing_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        kernels.open_direct(tmp_path / "missing.bin")
    assert info.value.filename == str(tmp_path / "missing.bin")


def test_buffered_reads_into_bytearray_and_memoryview(data_file):
    fd = os.open(data_file, os.O_RDONLY)
    try:
        want = data_file.read_bytes()[10:20]
        for out in (bytearray(10), memoryview(bytearray(10))):
            assert kernels.pread_ranges(fd, [10], [10], out, [0], direct=False) == 10
            assert bytes(out) == want
    finally:
        os.close(fd)
