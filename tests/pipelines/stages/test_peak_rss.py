"""Each stage's build records its own peak RSS (the process's high-water mark reset at its start), while
``peak_rss_mb`` still answers the process's."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.stages.common import peak_rss_mb, reset_peak_rss, stage_peak_rss_mb


def test_a_reset_starts_a_new_stage_peak_and_keeps_the_process_peak() -> None:
    if not reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here (not Linux?)")
    big = np.ones(96 << 17)  # 96 MiB of float64, touched
    during = stage_peak_rss_mb()
    del big
    assert reset_peak_rss()
    after = stage_peak_rss_mb()
    assert after < during - 64  # the 96 MiB are not this stage's
    assert peak_rss_mb() >= during - 4  # the kernel syncs its per-thread RSS counters lazily (pages, not MiB)
