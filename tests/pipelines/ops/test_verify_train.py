"""A flipped byte in the trained model's weights is caught before anything loads them; the next run retrains.

Its own module because training pays MLflow's one-time store setup (most of this file's time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from storage_kernels.integrity import ArtifactCorrupted
from tests.pipelines.ops.test_verify import CFG, _flip, _middle


def test_flipped_weights_are_caught_and_retrained(tmp_path: Path) -> None:
    store = StrataPaths.at(tmp_path).store()
    train = StageRunner(CFG, store).run_until("train", checks=False)[-1].artifact
    weights = train.path / "state_dict.pt"
    _flip(weights, _middle(train, "state_dict.pt"))
    runner = StageRunner(CFG, store)
    with pytest.raises(ArtifactCorrupted) as info:
        runner.result("train")
    assert f"'{weights}' expected checksum {train.files['state_dict.pt'].checksum} (got blake2b:" in str(info.value)
    assert "train" not in runner._results and not train.path.exists()
    again = StageRunner(CFG, store).result("train")
    assert not again.reused and again.version == train.version and again.artifact.path == train.path
