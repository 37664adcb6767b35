"""Integrity: digests recorded at publish, full and sampled verification, quarantine, old manifests, rebuild."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.arrays import file_checksum
from storage_kernels.catalog import Catalog
from storage_kernels.integrity import (
    BLOCK_BYTES,
    QUARANTINE_NAME,
    SAMPLE_BLOCKS,
    ArtifactCorrupted,
    block_digests,
    find_verified,
    manifest_digest,
    sample_offsets,
    verify_artifact,
    verify_manifest_dir,
)
from storage_kernels.store import Artifact, ArtifactStore

BIG_BLOCKS = SAMPLE_BLOCKS + 6  # a raw file too large to be sampled completely


def _publish(store: ArtifactStore, k: int = 1, dataset: str = "ds", stage: str = "graph", big: bool = False
             ) -> Artifact:
    v = store.version_for(stage, 1, {"k": k}, {})
    with store.builder(dataset, stage, v, {"k": k}, {}, format_version=1) as b:
        b.save_array("ids", np.arange(1000 * k, dtype=np.int64))
        blocks = BIG_BLOCKS if big else 1
        b.add_file("big.bin").write_bytes(np.random.default_rng(k).bytes(blocks * BLOCK_BYTES - 3))
        b.write_json("meta", {"k": k})
        b.stats.update({"k": k, "acc": 0.5})
        b.timings["build_s"] = 0.25
        return b.publish()


def _store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path, catalog=False)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def test_sample_offsets_cover_small_files_and_spread_over_large_ones() -> None:
    assert sample_offsets(0) == []
    assert sample_offsets(1) == [0]
    small = (SAMPLE_BLOCKS + 2) * BLOCK_BYTES
    assert sample_offsets(small) == [i * BLOCK_BYTES for i in range(SAMPLE_BLOCKS + 2)]
    big = sample_offsets(100 * BLOCK_BYTES + 5)
    assert len(big) == SAMPLE_BLOCKS + 2 and big[0] == 0 and big[-1] == 100 * BLOCK_BYTES
    assert big == sorted(set(big)) == sample_offsets(100 * BLOCK_BYTES + 5)  # deterministic


def test_publish_records_block_digests_and_a_manifest_digest(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    on_disk = json.loads((art.path / "manifest.json").read_text())
    assert on_disk["manifest_digest"] == manifest_digest(on_disk)
    blocks = on_disk["integrity"]["blocks"]
    assert set(blocks) == set(art.files)
    assert blocks["big.bin"] == block_digests(art.path / "big.bin")
    assert len(blocks["big.bin"]) == 1
    for mode in ("full", "sampled"):
        check = verify_artifact(Artifact(art.path), mode)
        assert check.status == "OK", check.files
    full = verify_artifact(Artifact(art.path), "full")
    assert full.bytes_read == sum(i.bytes for i in art.files.values())


def test_full_mode_catches_a_flipped_byte_anywhere(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    for name in ("ids.npy", "big.bin", "meta.json"):
        size = art.files[name].bytes
        for offset in (0, size // 2 + 3, size - 1):
            _flip(art.path / name, offset)
            check = verify_artifact(Artifact(art.path), "full")
            assert check.status == "BAD" and [f.name for f in check.bad] == [name], (name, offset)
            bad = check.bad[0]
            assert bad.expected == art.files[name].checksum and bad.actual == file_checksum(art.path / name)
            assert check.problem().startswith(f"'{art.path / name}' expected checksum blake2b:")
            _flip(art.path / name, offset)  # flipped back: intact again
            assert verify_artifact(Artifact(art.path), "full").status == "OK"


def test_sampled_mode_catches_flips_in_sampled_blocks_only(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    _flip(art.path / "ids.npy", art.files["ids.npy"].bytes // 2)  # a small file is sampled completely
    assert [f.name for f in verify_artifact(Artifact(art.path), "sampled").bad] == ["ids.npy"]

    art2 = _publish(_store(tmp_path), k=2, big=True)
    sampled = {off // BLOCK_BYTES for off in sample_offsets(art2.files["big.bin"].bytes)}
    unsampled = next(i for i in range(BIG_BLOCKS) if i not in sampled)
    _flip(art2.path / "big.bin", unsampled * BLOCK_BYTES + 7)
    assert verify_artifact(Artifact(art2.path), "sampled").status == "OK"  # the documented blind spot
    assert verify_artifact(Artifact(art2.path), "full").status == "BAD"
    _flip(art2.path / "big.bin", max(sampled) * BLOCK_BYTES + 11)
    bad = verify_artifact(Artifact(art2.path), "sampled").bad
    assert [f.name for f in bad] == ["big.bin"]
    assert bad[0].checked == f"block digest at byte {max(sampled) * BLOCK_BYTES}"


def test_a_truncated_or_missing_file_is_bad_in_every_mode(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    with open(art.path / "big.bin", "r+b") as f:
        f.truncate(10)
    (art.path / "meta.json").unlink()
    for mode in ("full", "sampled"):
        bad = {f.name: (f.expected, f.actual) for f in verify_artifact(Artifact(art.path), mode).bad}
        assert bad == {"big.bin": (f"{BLOCK_BYTES - 3} bytes", "10 bytes"), "meta.json": ("present", "missing")}


def test_a_changed_manifest_value_is_caught(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    mpath = art.path / "manifest.json"
    mpath.write_text(mpath.read_text().replace('"acc": 0.5', '"acc": 0.9'))  # still valid JSON
    check = verify_artifact(Artifact(art.path), "sampled")
    assert [f.name for f in check.bad] == ["manifest.json"]


def test_old_manifests_load_and_verify_what_they_can(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    mpath = art.path / "manifest.json"
    manifest = json.loads(mpath.read_text())
    for key in ("integrity", "manifest_digest"):
        del manifest[key]
    mpath.write_text(json.dumps(manifest))
    full = verify_artifact(Artifact(art.path), "full")
    assert full.status == "UNVERIFIABLE" and [f.name for f in full.unverifiable] == ["manifest.json"]
    sampled = verify_artifact(Artifact(art.path), "sampled")
    assert {f.name for f in sampled.unverifiable} == {"manifest.json", *art.files}
    assert all("size only" in f.detail for f in sampled.unverifiable if f.name != "manifest.json")
    _flip(art.path / "big.bin", 5)
    assert verify_artifact(Artifact(art.path), "full").status == "BAD"  # the whole-file checksum was always there


def test_find_verified_quarantines_and_names_the_file(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    art = _publish(store)
    assert store.catalog is not None
    store.catalog.record_metrics("ds", "graph", art.version, {"acc": 0.5})
    assert find_verified(store, "ds", "graph", art.version, "full") == art
    _flip(art.path / "ids.npy", 5000)
    with pytest.raises(ArtifactCorrupted) as info:
        find_verified(store, "ds", "graph", art.version, "full")
    message = str(info.value)
    assert f"'{art.path / 'ids.npy'}' expected checksum {art.files['ids.npy'].checksum} (got blake2b:" in message
    assert "the next run rebuilds it" in message
    moved = info.value.moved_to
    assert moved is not None and moved.parent == tmp_path / QUARANTINE_NAME / "ds" / "graph"
    assert json.loads((moved / "QUARANTINE.json").read_text())["from"] == str(art.path)
    assert not art.path.exists() and store.find("ds", "graph", art.version) is None
    assert store.catalog.get(art.version) is None and store.catalog.list_artifacts() == []
    assert find_verified(store, "ds", "graph", art.version, "full") is None  # absent: the stage rebuilds it
    assert store.catalog.rebuild(tmp_path) == 0  # the quarantine is hidden from the rebuild


def test_find_verified_quarantines_an_unreadable_manifest(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    art = _publish(store)
    (art.path / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactCorrupted, match=r"manifest.json' expected a valid manifest \(got ValueError"):
        find_verified(store, "ds", "graph", art.version, "sampled")
    assert not art.path.exists()
    off = _publish(_store(tmp_path), k=3)
    _flip(off.path / "ids.npy", 5000)
    assert find_verified(store, "ds", "graph", off.version, "off") == off  # off reads nothing


def test_verify_manifest_dir_reports_a_bad_manifest(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    (art.path / "manifest.json").write_text(json.dumps({"dataset": "ds"}))
    check = verify_manifest_dir(art.path)
    assert check.status == "BAD" and check.artifact is None and "expected keys" in check.bad[0].actual


def test_rebuild_skips_bad_manifests_and_restores_metrics(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    good = _publish(store, 1)
    bad = _publish(store, 2)
    (bad.path / "manifest.json").write_text('{"dataset": "ds", "stage": "graph", "vers')
    for p in tmp_path.glob("catalog.duckdb*"):
        p.unlink()
    cat = Catalog(tmp_path / "catalog.duckdb")
    report = cat.rebuild_report(tmp_path)
    assert report.indexed == 1 and [p for p, _ in report.skipped] == [str(bad.path / "manifest.json")]
    assert "expected a JSON manifest" in report.skipped[0][1]
    metrics = {m["key"]: m["value"] for m in cat.get(good.version)["metrics"]}  # type: ignore[index]
    assert metrics["k"] == 1.0 and metrics["acc"] == 0.5 and metrics["time_build_s"] == 0.25
    assert report.metrics_restored == len(metrics)
    again = cat.rebuild_report(tmp_path)  # metrics already there: not duplicated
    assert again.metrics_restored == 0 and len(cat.get(good.version)["metrics"]) == len(metrics)  # type: ignore[index]


def test_forget_artifact_drops_every_row(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    art = _publish(store)
    assert store.catalog is not None
    store.catalog.record_metrics("ds", "graph", art.version, {"acc": 1.0})
    store.catalog.forget_artifact("ds", "graph", art.version)
    assert store.catalog.get(art.version) is None
    store.catalog.rebuild(tmp_path)
    assert {m["key"] for m in store.catalog.get(art.version)["metrics"]} == {"k", "acc", "time_build_s",  # type: ignore[index]
                                                                               "time_publish_checksum_s"}


def test_verify_is_read_only(tmp_path: Path) -> None:
    art = _publish(_store(tmp_path))
    before = {p: os.stat(p).st_mtime_ns for p in art.path.iterdir()}
    verify_artifact(Artifact(art.path), "full")
    assert before == {p: os.stat(p).st_mtime_ns for p in art.path.iterdir()}


def test_a_version_directory_without_a_manifest_is_quarantined_then_rebuilt(tmp_path: Path) -> None:
    """A manifest deleted by hand: the directory is no artifact, and a rebuilt one could not be published into it
    (the rename fails: directory not empty). It is caught like a corrupted artifact, and the next lookup finds
    nothing, so the stage rebuilds."""
    store = ArtifactStore(tmp_path)
    art = _publish(store)
    (art.path / "manifest.json").unlink()
    assert store.find("ds", "graph", art.version) is None
    with pytest.raises(ArtifactCorrupted, match=r"manifest.json' expected a valid manifest \(got no such file: a "
                                                r"version directory without one\)"):
        find_verified(store, "ds", "graph", art.version, "sampled")
    assert not art.path.exists() and find_verified(store, "ds", "graph", art.version, "full") is None
    assert _publish(store).version == art.version  # the same version publishes again


def test_unpublished_dirs_finds_version_directories_without_a_manifest(tmp_path: Path) -> None:
    from storage_kernels.storefs import unpublished_dirs

    store = _store(tmp_path)
    kept, lost = _publish(store), _publish(store, k=2, stage="sample")
    (lost.path / "manifest.json").unlink()
    (tmp_path / "mlflow" / "artifacts" / "1").mkdir(parents=True)  # not a version name: never matched
    (tmp_path / ".quarantine" / "ds" / "graph" / "0123456789ab").mkdir(parents=True)  # hidden
    (tmp_path / "ds" / "graph" / "0123456789ab").mkdir()  # empty: absent, a rebuilt artifact renames over it
    assert find_verified(store, "ds", "graph", "0123456789ab", "full") is None
    assert unpublished_dirs(tmp_path) == [lost.path]
    assert unpublished_dirs(tmp_path, "ds") == [lost.path] and unpublished_dirs(tmp_path, "other") == []
    assert kept.path.exists()
