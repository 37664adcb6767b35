"""Partitioned packing: the shards merged equal the unpartitioned ``pack`` artifact byte for byte (diskgnn, ginex,
a policy without a layout); a missing or corrupted shard is named and leaves the pack untouched; a policy whose
pack is global is refused by name. The Dagster partitions: ``test_pack_partitions_dagster.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.config import PipelineConfig
from pipelines.shards import pack as pack_shards
from pipelines.shards.pack import ShardError, find_shards, merge, prepare, run_shard
from pipelines.shards.sample import shard_bounds
from pipelines.stages import pack, partition, plan, reorder, sample
from storage_kernels.store import Artifact, ArtifactStore
from tests import REPO
from tests.pipelines.stage_fixtures import make_graph_artifact

pytestmark = pytest.mark.skipif(importlib.util.find_spec("storage_kernels._native") is None,
                                reason="the storage_kernels._native extension is not built")

_SAMPLING = ["sample.fanouts=[4,3]", "sample.batch_size=32", "sample.epochs=2", "sample.eval_batch_size=100",
             "partition.num_parts=4", "pack.memory_mb=1"]
_POLICIES = {  # policy -> its settings: diskgnn with segment disk caches and their window, ginex superbatches,
    # hyperbatch several hyperbatches per epoch
    "diskgnn": ["pack.disk_budget=2.0", "plan.cpu_cache_fraction=0.1", "plan.gpu_cache_fraction=0.05"],
    "ginex": ["plan.superbatch_size=3", "plan.cpu_cache_fraction=0.2"],
    "hyperbatch": ["plan.hyperbatch_bytes=65536"],
    "naive": [],
}


def _cfg(policy: str) -> PipelineConfig:
    return PipelineConfig.load(overrides=[*_SAMPLING, f"policy={policy}", *_POLICIES[policy]], dataset="unit")


def _upstream(store: ArtifactStore, cfg: PipelineConfig) -> dict[str, Artifact]:
    graph = make_graph_artifact(store, n=800)
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    samples = sample.run(store, cfg, reorder=ordering, partition=parting).artifact
    return {"reorder": ordering, "sample": samples, "plan": plan.run(store, cfg, reorder=ordering,
                                                                     sample=samples).artifact}


def _assert_same(merged: Artifact, reference: Artifact) -> None:
    assert merged.version == reference.version
    assert sorted(merged.files) == sorted(reference.files)
    for name in reference.files:
        assert (merged.path / name).read_bytes() == (reference.path / name).read_bytes(), name
    strip = lambda stats: {k: v for k, v in stats.items() if k != "peak_rss_mb"}  # noqa: E731
    assert strip(merged.stats) == strip(reference.stats)


@pytest.mark.parametrize("policy", sorted(_POLICIES))
def test_merged_shards_equal_the_unpartitioned_pack(tmp_path: Path, policy: str) -> None:
    cfg = _cfg(policy)
    a = ArtifactStore(tmp_path / "a")
    reference = pack.run(a, cfg, **_upstream(a, cfg)).artifact
    store = ArtifactStore(tmp_path / "b")
    up = _upstream(store, cfg)
    shards = [run_shard(store, cfg, i, 3, **up) for i in range(3)]
    units = prepare(store, cfg, **up).artifact.stats["units"]
    assert [s.artifact.stats["first_unit"] for s in shards] == shard_bounds(units, 3)[:3]
    if policy == "diskgnn":  # batches; the shards cut through segments, each with its disk cache and window
        assert units == reference.stats["num_batches"] and reference.stats["segments"] > 1
        assert "window_meta.json" in reference.files and reference.stats["disk_cache_rows"] > 0
    elif policy == "ginex":  # superbatches
        assert units == reference.stats["superbatches"] >= 3
    elif policy == "hyperbatch":  # row groups of aligned.bin (whole blocks each)
        assert units * reference.stats["rows_per_block"] >= 800 > (units - 1) * reference.stats["rows_per_block"]
        assert reference.stats["hyperbatches"] > 1
    else:
        assert units == 0 and reference.stats["layout"] == "none"
    merged = merge(store, cfg, 3, **up)
    assert not merged.reused
    _assert_same(merged.artifact, reference)
    assert run_shard(store, cfg, 1, 3, **up).reused
    assert pack.run(store, cfg, **up).reused  # the unpartitioned stage finds the merged artifact


def test_a_global_pack_is_refused_by_name(tmp_path: Path) -> None:
    cfg = PipelineConfig.load(overrides=[*_SAMPLING, "policy=mariusgnn"], dataset="unit")
    store = ArtifactStore(tmp_path)
    with pytest.raises(ValueError, match=r"runs partitioned \(diskgnn, ginex, hyperbatch, in_memory, mmap, naive\) "
                                         r"\(got mariusgnn"):
        run_shard(store, cfg, 0, 2, **_upstream(store, cfg))


def test_a_bad_shard_is_named_and_the_pack_left_intact(tmp_path: Path) -> None:
    cfg = _cfg("diskgnn")
    store = ArtifactStore(tmp_path)
    up = _upstream(store, cfg)
    with pytest.raises(ShardError, match="expected the pack prep"):  # nothing packed yet
        merge(store, cfg, 3, **up)
    shards = [run_shard(store, cfg, i, 3, **up).artifact for i in range(3)]
    # corrupted: one byte of a shard's address table flipped; the merge fails before writing, naming it
    target = shards[1].file("addr_slot.npy")
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"'pack_shards' partition 1 expected an intact shard .*addr_slot\.npy") as e:
        merge(store, cfg, 3, **up)
    assert e.value.index == 1
    assert store.artifacts("unit", "pack") == []  # nothing published
    # the corrupted shard was moved aside: packing the partition again rebuilds it
    assert find_shards(store, cfg, 3, **up)[1] is None
    assert not run_shard(store, cfg, 1, 3, **up).reused
    packed = merge(store, cfg, 3, **up).artifact
    before = {name: (packed.path / name).read_bytes() for name in packed.files}
    # a corrupted prep (the global part the merge copies) is named too, and rebuilt by packing any partition
    prep = prepare(store, cfg, **up).artifact
    (prep.path / "segment_rows.npy").write_bytes(b"\0" * prep.files["segment_rows.npy"].bytes)
    with pytest.raises(ShardError, match=r"expected an intact pack prep .*segment_rows\.npy"):
        merge(store, cfg, 3, **up)
    assert not store.find("unit", pack_shards.PREP_STAGE, prep.version)  # moved aside
    assert run_shard(store, cfg, 0, 3, **up).reused  # the shard is intact; the prep was rebuilt before it
    assert prepare(store, cfg, **up).artifact.verify() and merge(store, cfg, 3, **up).reused
    # missing: a shard removed; the existing pack artifact stays as it was
    for name in [*shards[2].files, "manifest.json"]:
        (shards[2].path / name).unlink()
    with pytest.raises(ShardError, match=r"'pack_shards' partition 2 expected a shard at .* \(got none: "
                                         "materialize partition 2 first\\)"):
        merge(store, cfg, 3, **up)
    assert packed.verify() == len(before)
    assert {name: (packed.path / name).read_bytes() for name in packed.files} == before
    assert pack.run(store, cfg, **up).artifact.version == packed.version


_CHILD = """
import json, pickle, sys
from pipelines.shards.pack import prepare, run_shard
from storage_kernels.store import Artifact, ArtifactStore
cfg = pickle.loads(bytes.fromhex(sys.argv[1]))  # the parent's configuration (loading one imports torch)
store, paths, index, shards = ArtifactStore(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
up = {name: Artifact(path) for name, path in paths.items()}
built = not prepare(store, cfg, **up).reused
print(json.dumps([built, run_shard(store, cfg, index, shards, **up).version]))
"""


def test_shards_packed_by_parallel_processes_merge_into_the_pack(tmp_path: Path) -> None:
    """What a backfill does: every shard in its own process at once; the prep is written by exactly one."""
    cfg = _cfg("diskgnn")
    a = ArtifactStore(tmp_path / "a")
    reference = pack.run(a, cfg, **_upstream(a, cfg)).artifact
    store = ArtifactStore(tmp_path / "b")
    up = _upstream(store, cfg)
    paths = json.dumps({name: str(art.path) for name, art in up.items()})
    root = str(REPO)  # this checkout's packages, not an installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    # separate interpreters (a fork of this multi-threaded test process can deadlock)
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, pickle.dumps(cfg).hex(), str(tmp_path / "b"), paths,
                               str(i), "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(3)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [built for built, _ in results].count(True) == 1  # the others waited for it, then reused it
    assert len(store.artifacts("unit", pack_shards.PREP_STAGE)) == 1
    assert [v for _, v in results] == [s.version for s in find_shards(store, cfg, 3, **up)]
    _assert_same(merge(store, cfg, 3, **up).artifact, reference)
