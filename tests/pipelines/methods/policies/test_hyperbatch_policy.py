"""The ``hyperbatch`` policy through the stage runner (every check, training) and the aligned layout's checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.checks.aligned import ALIGNED_LAYOUT, check_aligned_rows, check_hyperbatch_tables
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from storage_kernels.alignedstore import ALIGNED_BIN, BlockLayout
from storage_kernels.store import Artifact

CFG = PipelineConfig.load(dataset="tiny", overrides=[
    "policy=hyperbatch", "train.epochs=2", "sample.epochs=2", "sample.batch_size=256", "train.device=cpu",
    "partition.num_parts=4", "plan.cpu_cache_fraction=0.1", "plan.hyperbatch_bytes=327680"])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[StageRunner, dict[str, Artifact]]:
    runner = StageRunner(CFG, StrataPaths.at(tmp_path_factory.mktemp("hb-root")).store())
    results = {r.artifact.stage: r.artifact for r in runner.run_until("train")}  # every stage's checks pass
    return runner, results


def test_training_with_hyperbatch_equals_training_in_memory(run: tuple[StageRunner, dict[str, Artifact]]) -> None:
    runner, art = run
    graph, planned, packed, trained = art["reorder"], art["plan"], art["pack"], art["train"]
    n, dim = graph.array("features.npy").shape

    # plan: the hotset is the top degree x training-access-frequency scores within the CPU budget
    degree, freq = np.diff(graph.array("indptr.npy")), planned.array("frequency.npy")
    hot = planned.array("cpu_nodes.npy")
    assert 0 < len(hot) <= int(0.1 * n * dim * 4) // (dim * 4) and len(planned.array("gpu_nodes.npy")) == 0
    score = degree * freq
    rest = np.setdiff1d(np.flatnonzero(freq), hot)
    assert score[hot].min() >= score[rest].max()

    # pack: the aligned file, its blow-up, hyperbatches of several batches
    s = packed.stats
    assert s["layout"] == "hyperbatch" and s["hotset_rows"] == len(hot)
    assert s["disk_blowup"] == pytest.approx(packed.file(ALIGNED_BIN).stat().st_size / (n * dim * 4))
    assert s["hyperbatches"] >= 2 and s["batches_per_hyperbatch"] > 1

    # train: features came from the hotset and the hyperbatches; the model is the one in-memory features give
    t = trained.stats
    assert t["policy"] == "hyperbatch" and t["bytes_read"] > 0 and 0 < t["cache_hit_rate"] < 1
    baseline = runner.derive(CFG.model_copy(update={"policy": "in_memory"})).run_until("train")[-1].artifact
    assert baseline.stats["bytes_read"] == 0
    for key in ("final_loss", "val_acc", "test_acc"):
        assert t[key] == baseline.stats[key], key


def test_the_aligned_layout_check_catches_a_corrupted_row(run: tuple[StageRunner, dict[str, Artifact]]) -> None:
    runner, art = run
    packed = art["pack"]
    finding = ALIGNED_LAYOUT.run(packed, runner.store)
    assert finding.passed and finding.facts["rows_compared"] > 0 and finding.facts["hyperbatches"] >= 2
    path = packed.file(ALIGNED_BIN)
    raw = np.memmap(path, dtype=np.uint8, mode="r+")
    raw[:4] = ~raw[:4]  # row 0 (always among the compared rows)
    raw.flush()
    del raw
    bad = ALIGNED_LAYOUT.run(packed, runner.store)
    assert not bad.passed and "row 0 expected features.npy's row" in bad.problems[0]
    skipped = ALIGNED_LAYOUT.run(art["plan"], runner.store)  # not a hyperbatch layout: passes, says so
    assert skipped.passed and "no block-aligned feature file" in skipped.facts["layout"]


def test_check_aligned_rows_and_tables_on_hand_made_arrays(tmp_path: Path) -> None:
    features = np.arange(30 * 3, dtype=np.float32).reshape(30, 3)  # 12-byte rows: 341 per block
    layout = BlockLayout(30, 12)
    good = np.zeros(4096, np.uint8)
    good[: 30 * 12] = features.view(np.uint8).ravel()
    assert check_aligned_rows(good, layout, features).passed
    assert "expected 4096 bytes" in check_aligned_rows(good[:100], layout, features).problems[0]
    assert "expected 30 rows of 3 floats" in check_aligned_rows(good, BlockLayout(3, 12), features).problems[0]
    epochs = [[0, 2], [1, 3]]
    ok = check_hyperbatch_tables([0, 2, 1, 3], [0, 1, 2, 4], [0, 2, 3], epochs, 5)
    assert ok.passed and ok.facts["hyperbatches"] == 3
    swapped = check_hyperbatch_tables([2, 0, 1, 3], [0, 1, 2, 4], [0, 2, 3], epochs, 5)
    assert "training batches of sample epoch 0 in training order" in swapped.problems[0]
    spans = check_hyperbatch_tables([0, 2, 1, 3], [0, 3, 4], [0, 1, 2], epochs, 5)  # hyperbatch 0 spans epochs
    assert not spans.passed
