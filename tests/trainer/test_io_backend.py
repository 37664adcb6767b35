"""DirectFile's read backends ("auto" | "uring" | "pread"): resolution, the process default set from
``train.io_backend``, and the feature tiers reading the same rows with the same counters on either backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.packstore import Tier
from trainer.config import TrainConfig
from trainer.features import FileTier, InMemoryFeatures, PackedFeatures, TieredSource
from trainer.features.base import DirectFile
from trainer.features.iobackend import io_defaults, resolve_backend, set_io_defaults

URING, WHY = kernels.io_uring_available()
needs_uring = pytest.mark.skipif(not URING, reason=f"io_uring unavailable: {WHY}")
ROWS = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows: some straddle 4096 blocks


class B:
    def __init__(self, batch: int, nodes: list[int]) -> None:
        self.batch, self.nodes = batch, np.array(nodes, dtype=np.int64)


@pytest.fixture
def restore_defaults():
    before = io_defaults()
    yield
    set_io_defaults(*before)


def test_resolution_and_explicit_backends(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8192))
    f = DirectFile(path, "rows", backend="pread")
    assert (f.backend, f.backend_reason) == ("pread", "")
    f.close()
    assert resolve_backend("auto").name == ("uring" if URING else "pread")
    # io_uring switched off: auto falls back with the reason, an explicit "uring" is refused
    monkeypatch.setenv(kernels.DISABLE_IO_URING_ENV, "1")
    auto = resolve_backend("auto", 8)
    assert auto.name == "pread" and auto.queue_depth == 8 and "STRATA_DISABLE_IO_URING=1" in auto.reason
    with pytest.raises(OSError, match=r"'io_backend' expected io_uring to be available \(got io_uring disabled"):
        DirectFile(path, "rows", backend="uring")
    with pytest.raises(ValueError, match=r"'io_backend' expected one of \['auto', 'uring', 'pread'\] \(got 'aio'\)"):
        resolve_backend("aio")
    with pytest.raises(ValueError, match=r"'io_queue_depth' expected 1..4096 \(got 0\)"):
        resolve_backend("pread", 0)


def test_process_default_reaches_direct_files(tmp_path: Path, restore_defaults) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8192))
    set_io_defaults("pread", 3)
    f = DirectFile(path, "rows")
    assert (f.backend, f.queue_depth) == ("pread", 3)
    f.close()
    with pytest.raises(ValueError, match="'io_backend' expected one of"):
        set_io_defaults("fast")
    assert io_defaults() == ("pread", 3)


def test_train_config_declares_the_settings() -> None:
    from pipelines.config import PipelineConfig  # noqa: F401  (the train section is TrainConfig)
    from trainer.config import artifact_effect

    fields = TrainConfig.__pydantic_fields__
    assert artifact_effect(fields["io_backend"]) is False and artifact_effect(fields["io_queue_depth"]) is False
    assert TrainConfig().io_backend == "auto" and TrainConfig().io_queue_depth == 256
    with pytest.raises(ValueError, match="'TrainConfig.io_backend' expected a value in range"):
        TrainConfig(io_backend="aio")
    with pytest.raises(ValueError, match="'TrainConfig.io_queue_depth' expected a value in range"):
        TrainConfig(io_queue_depth=0)


@needs_uring
@pytest.mark.parametrize("merge", [False, True])
def test_file_tier_same_rows_and_counters_on_both_backends(tmp_path: Path, restore_defaults, merge) -> None:
    """The per-row baseline stays one read per row under io_uring (no merging), the merged path too."""
    save_array(tmp_path / "f.npy", ROWS)
    nodes = [40, 0, 299, 40, 163, 81, 41, 42]
    counters = {}
    for backend in ("pread", "uring"):
        set_io_defaults(backend, 2)
        with TieredSource(FileTier(tmp_path / "f.npy", merge=merge)) as source:
            assert source.tier(Tier.FILE).file._file.backend == backend
            assert torch.equal(source.load(B(0, nodes)), torch.from_numpy(ROWS[nodes]))
            counters[backend] = (source.bytes_read, source.read_requests)
    assert counters["pread"] == counters["uring"]
    assert counters["uring"][1] == (len(nodes) if not merge else 2)


@needs_uring
def test_packed_features_equal_in_memory_on_uring(dataset, packed_dir: Path, restore_defaults) -> None:
    """Every tier of the packed store (chunks, then the feature file for evaluation batches) over io_uring."""
    reference = InMemoryFeatures(dataset.features)
    set_io_defaults("uring", 4)
    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as packed:
        assert packed.tier(Tier.PACKED)._file.backend == "uring"
        assert packed.tier(Tier.FILE).file._file.backend == "uring"
        for b in range(dataset.samples.num_batches):
            batch = dataset.samples.batch(b)
            assert torch.equal(packed.load(batch), reference.load(batch)), b
        assert packed.read_requests > 0
