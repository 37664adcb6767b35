"""Corruption never spreads: byte flips in every artifact kind are caught on reuse, quarantined and rebuilt;
``strata verify`` finds and repairs them; NaN features whose manifest matches fail a content check, on use and in
``verify``, and are quarantined and rebuilt too; ``catalog rebuild`` survives a broken manifest and restores metrics;
a source rewritten with the same size and mtime is ingested again.

One small synthetic graph is built through ``pack`` once per module; every case works on a copy of that root.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import CheckFailed, StageRunner
from pipelines.stages import ingest
from storage_kernels.arrays import file_checksum
from storage_kernels.digests import integrity_record, manifest_digest
from storage_kernels.integrity import QUARANTINE_NAME, ArtifactCorrupted
from storage_kernels.store import Artifact
from tests.pipelines.source_fixtures import hand_graph

SPEC = "synthetic:nodes=600,degree=6,dim=8,classes=3,seed=0"
SETS = ["policy=diskgnn", "sample.epochs=1", "partition.num_parts=2", "sample.batch_size=128", "train.epochs=1"]
CFG = PipelineConfig.load(overrides=SETS, dataset=SPEC)
STAGES = ("ingest", "reorder", "partition", "sample", "plan", "pack")
cli = CliRunner()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    root = tmp_path_factory.mktemp("pristine")
    results = StageRunner(CFG, StrataPaths.at(root).store()).run_until("pack", checks=False)
    return {r.artifact.stage: r.artifact for r in results}


def _copy(pristine: dict[str, Artifact], tmp_path: Path) -> Path:
    src = pristine["ingest"].path.parents[2]
    dst = tmp_path / "root"
    shutil.copytree(src, dst)
    return dst


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


def _middle(art: Artifact, name: str) -> int:
    info = art.files[name]
    return info.data_offset + (info.bytes - info.data_offset) // 2


def _run(root: Path) -> dict[str, bool]:
    """Every stage through pack; stage -> reused."""
    return {r.artifact.stage: r.reused for r in
            StageRunner(CFG, StrataPaths.at(root).store()).run_until("pack", checks=False)}


# One case per artifact kind: the graph's CSR, the ordering's features, partition, samples (arrays and the
# batch table), the plan, the packed layout and its address table.
CASES = [("ingest", "indices.npy"), ("reorder", "features.npy"), ("partition", "parts.npy"),
         ("sample", "nodes.npy"), ("sample", "batches.parquet"), ("plan", "slot.npy"),
         ("pack", "packed.bin"), ("pack", "addr_slot.npy")]


def test_every_case_names_an_existing_non_empty_file(pristine: dict[str, Artifact]) -> None:
    for stage, name in CASES:
        info = pristine[stage].files[name]
        assert info.bytes > info.data_offset, (stage, name)


@pytest.mark.parametrize(("stage", "name"), CASES)
def test_a_flipped_byte_is_caught_before_use_and_the_next_run_rebuilds(
        pristine: dict[str, Artifact], tmp_path: Path, stage: str, name: str) -> None:
    root = _copy(pristine, tmp_path)
    art = pristine[stage]
    target = root / art.path.relative_to(art.path.parents[2]) / name
    _flip(target, _middle(art, name))
    runner = StageRunner(CFG, StrataPaths.at(root).store())
    with pytest.raises(ArtifactCorrupted) as info:
        runner.run_until("pack", checks=False)
    message = str(info.value)
    assert f"'{target}' expected checksum {art.files[name].checksum} (got blake2b:" in message
    assert f"artifact {target.parent} is corrupted" in message
    downstream = STAGES[STAGES.index(stage) + 1:]
    assert not any(s in runner._results for s in (stage, *downstream))  # nothing read the bad artifact
    assert not target.parent.exists()
    moved = info.value.moved_to
    assert moved is not None and (moved / name).is_file() and moved.is_relative_to(root / QUARANTINE_NAME)
    catalog = StrataPaths.at(root).catalog()
    assert catalog.get(art.version, stage=stage) is None

    reused = _run(root)  # the next run rebuilds exactly that artifact, bit for bit
    assert reused == {s: s != stage for s in STAGES}
    assert file_checksum(target) == art.files[name].checksum
    assert catalog.get(art.version, stage=stage) is not None


def test_a_changed_manifest_is_caught_and_sampled_mode_is_wired(pristine: dict[str, Artifact],
                                                                tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    art = pristine["plan"]
    mpath = root / art.path.relative_to(art.path.parents[2]) / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["stats"]["peak_rss_mb"] = -1.0
    mpath.write_text(json.dumps(manifest))
    sampled = CFG.model_copy(update={"verify": CFG.verify.model_copy(update={"on_reuse": "sampled"})})
    with pytest.raises(ArtifactCorrupted, match=r"manifest.json' expected digest blake2b:"):
        StageRunner(sampled, StrataPaths.at(root).store()).run_until("pack", checks=False)
    art = pristine["pack"]  # off: nothing is read, the flip goes unnoticed (what the setting says)
    _flip(root / art.path.relative_to(art.path.parents[2]) / "packed.bin", 5)
    off = CFG.model_copy(update={"verify": CFG.verify.model_copy(update={"on_reuse": "off"})})
    assert StageRunner(off, StrataPaths.at(root).store()).result("pack").reused


def test_strata_verify_finds_and_repairs(pristine: dict[str, Artifact], tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    flipped = {}
    for stage, name in (("ingest", "indptr.npy"), ("sample", "cols.npy"), ("pack", "packed.bin")):
        art = pristine[stage]
        _flip(root / art.path.relative_to(art.path.parents[2]) / name, _middle(art, name))
        flipped[stage] = name
    result = cli.invoke(app, ["verify", "--root", str(root), "--json", "--threads", "2"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    status = {r["stage"]: r["status"] for r in report["results"]}
    assert status == {s: "BAD" if s in flipped else "OK" for s in STAGES}
    for r in report["results"]:
        if r["status"] == "BAD":
            assert f"{flipped[r['stage']]}' expected checksum blake2b:" in r["problem"]
    assert report["bad"] == 3 and report["ok"] == len(STAGES) - 3
    assert report["bytes_read"] == sum(i.bytes for a in pristine.values() for i in a.files.values())

    table = cli.invoke(app, ["verify", "--root", str(root), "--dataset", CFG.dataset_name])
    assert table.exit_code == 1 and "3 OK, 3 BAD, 0 UNVERIFIABLE" in table.stdout

    repaired = cli.invoke(app, ["verify", "--root", str(root), "--repair", "--json"])
    assert repaired.exit_code == 1 and len(json.loads(repaired.stdout)["quarantined"]) == 3
    again = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["artifacts"] == len(STAGES) - 3
    assert _run(root) == {s: s not in flipped for s in STAGES}
    final = cli.invoke(app, ["verify", "--root", str(root), "--mode", "sampled", "--json"])
    assert final.exit_code == 0 and json.loads(final.stdout)["ok"] == len(STAGES)


def test_an_old_manifest_is_unverifiable_not_bad(pristine: dict[str, Artifact], tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    art = pristine["partition"]
    mpath = root / art.path.relative_to(art.path.parents[2]) / "manifest.json"
    manifest = json.loads(mpath.read_text())
    del manifest["manifest_digest"], manifest["integrity"]  # as written before verification existed
    mpath.write_text(json.dumps(manifest))
    result = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["stage"]: r for r in json.loads(result.stdout)["results"]}
    assert rows["partition"]["status"] == "UNVERIFIABLE" and "without manifest_digest" in rows["partition"]["problem"]
    assert _run(root) == {s: True for s in STAGES}  # still reused: its files' checksums match


def test_catalog_rebuild_skips_a_broken_manifest_and_restores_metrics(pristine: dict[str, Artifact],
                                                                      tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    art = pristine["sample"]
    mpath = root / art.path.relative_to(art.path.parents[2]) / "manifest.json"
    mpath.write_bytes(mpath.read_bytes()[:100])
    for p in root.glob("catalog.duckdb*"):
        p.unlink()
    result = cli.invoke(app, ["catalog", "rebuild", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert f"indexed {len(STAGES) - 1} artifacts" in result.stdout and "skipped 1 bad manifest" in result.stdout
    assert f"'{mpath}' expected a JSON manifest" in result.stderr
    catalog = StrataPaths.at(root).catalog()
    pack = pristine["pack"]
    metrics = {m["key"]: m["value"] for m in catalog.get(pack.version, stage="pack")["metrics"]}  # type: ignore[index]
    assert metrics["num_batches"] == pack.stats["num_batches"] and metrics["time_total_s"] == pack.timings["total_s"]
    verify = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    assert verify.exit_code == 1 and json.loads(verify.stdout)["bad"] == 1


def test_a_source_rewritten_with_the_same_size_and_mtime_is_ingested_again(tmp_path: Path) -> None:
    g = hand_graph()
    edges = tmp_path / "edges.csv"
    edges.write_text("".join(f"{s},{d}\n" for s, d in zip(g["src"], g["dst"], strict=True)))
    options = {}
    for key in ("features", "labels", "train_idx", "val_idx", "test_idx"):
        np.save(tmp_path / f"{key}.npy", g[key])
        options[key] = str(tmp_path / f"{key}.npy")
    options["num_nodes"] = "6"
    cfg = PipelineConfig.load(dataset=f"edgelist:{edges}", overrides=[f"ingest.options.{k}={v}"
                                                                       for k, v in options.items()])
    store = StrataPaths.at(tmp_path / "root").store()
    first = ingest.run(store, cfg)
    assert not first.reused and ingest.run(store, cfg).reused
    os.utime(edges, ns=(edges.stat().st_atime_ns, edges.stat().st_mtime_ns + 10**9))
    assert ingest.run(store, cfg).version == first.version  # touched, same bytes: reused

    st = edges.stat()
    edges.write_text(edges.read_text().replace("3,4", "3,5"))  # same size, another edge
    os.utime(edges, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (edges.stat().st_size, edges.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    second = ingest.run(store, cfg)
    assert not second.reused and second.version != first.version
    assert not np.array_equal(second.artifact.array("indices"), first.artifact.array("indices"))


def test_a_manifest_deleted_by_hand_is_found_quarantined_and_rebuilt(pristine: dict[str, Artifact],
                                                                     tmp_path: Path) -> None:
    """The partition artifact's manifest deleted: `strata verify` reports the directory BAD (it had not seen it:
    it walked the manifests), `--repair` quarantines it, and the next run rebuilds the same version (before,
    every later run failed: a rebuilt artifact cannot be renamed into a non-empty directory)."""
    root = _copy(pristine, tmp_path)
    art = pristine["partition"]
    (root / art.path.relative_to(art.path.parents[2]) / "manifest.json").unlink()
    report = json.loads(cli.invoke(app, ["verify", "--root", str(root), "--json"]).stdout)
    bad = [r for r in report["results"] if r["status"] == "BAD"]
    assert [r["stage"] for r in bad] == ["partition"] and "got no such file" in bad[0]["problem"]
    repaired = cli.invoke(app, ["verify", "--root", str(root), "--repair", "--json"])
    assert repaired.exit_code == 1 and len(json.loads(repaired.stdout)["quarantined"]) == 1
    assert _run(root) == {s: s != "partition" for s in STAGES}  # the same version again: downstream reused


def _nan_with_a_matching_manifest(root: Path, art: Artifact) -> Path:
    """Write a NaN into the copy of ``art``'s features and redo its manifest's digests, as a NaN written before
    publishing would be: every checksum matches, only the content checks can see it. Returns the copy's path."""
    path = root / art.path.relative_to(art.path.parents[2])
    features = np.load(path / "features.npy", mmap_mode="r+")
    features[3, 1] = np.nan
    features.flush()
    del features
    mpath = path / "manifest.json"
    manifest = json.loads(mpath.read_text())
    for f in manifest["files"]:
        f["checksum"] = file_checksum(path / f["name"])
    manifest["integrity"] = integrity_record(path, [f["name"] for f in manifest["files"]])
    manifest["manifest_digest"] = manifest_digest(manifest)
    mpath.write_text(json.dumps(manifest))
    return path


def test_nan_features_with_a_matching_manifest_are_quarantined_on_use_and_rebuilt(
        pristine: dict[str, Artifact], tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    art = pristine["reorder"]
    path = _nan_with_a_matching_manifest(root, art)
    runner = StageRunner(CFG, StrataPaths.at(root).store())
    with pytest.raises(CheckFailed, match=r"'reorder:features_finite' failed on .*expected finite values \(got 1 "
                                          r"NaN/inf; the first at row 3, column 1: nan\) \(quarantined to ") as info:
        runner.run_until("sample")
    moved = info.value.moved_to
    assert moved is not None and moved.is_relative_to(root / QUARANTINE_NAME) and not path.exists()
    assert "features_finite" in json.loads((moved / "QUARANTINE.json").read_text())["reason"]
    assert "partition" not in runner._results
    assert StrataPaths.at(root).catalog().get(art.version, stage="reorder") is None

    assert _run(root) == {s: s != "reorder" for s in STAGES}  # the next run rebuilds it, bit for bit
    assert file_checksum(path / "features.npy") == art.files["features.npy"].checksum
    assert StageRunner(CFG, StrataPaths.at(root).store()).run_until("sample")  # and its checks pass


def test_verify_runs_the_content_checks_and_repair_quarantines(pristine: dict[str, Artifact],
                                                                tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    path = _nan_with_a_matching_manifest(root, pristine["reorder"])
    result = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    assert result.exit_code == 1, result.output
    rows = {r["stage"]: r for r in json.loads(result.stdout)["results"]}
    assert {s: r["status"] for s, r in rows.items()} == {s: "BAD" if s == "reorder" else "OK" for s in STAGES}
    assert rows["reorder"]["problem"] == (f"check 'reorder:features_finite' failed: '{path}/features.npy' expected "
                                          "finite values (got 1 NaN/inf; the first at row 3, column 1: nan)")
    sampled = cli.invoke(app, ["verify", "--root", str(root), "--mode", "sampled", "--json"])
    assert sampled.exit_code == 0  # sampled mode reads blocks only: it cannot see values

    repaired = cli.invoke(app, ["verify", "--root", str(root), "--repair", "--json"])
    assert repaired.exit_code == 1 and list(json.loads(repaired.stdout)["quarantined"]) == [str(path)]
    assert _run(root) == {s: s != "reorder" for s in STAGES}
    again = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["ok"] == len(STAGES)
