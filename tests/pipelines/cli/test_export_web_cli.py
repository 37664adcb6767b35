"""``strata export --web DIR [--screenshot PNG]`` on ``tiny`` through to success, and the ``export`` asset checks
failing on a damaged export.

One ``strata export --web`` (typer's CliRunner, short training) builds ``tiny`` once per module; the screenshot
test runs the command again (every stage reused) with ``--screenshot``; the check tests damage a copy of the
export and its ``train`` upstream and run ``export_files`` / ``onnx_matches_torch`` on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from pipelines.checks.model import EXPORT_FILES, ONNX_MATCHES_TORCH, ONNX_TOLERANCE
from pipelines.cli import app
from pipelines.cli.web import web_lines
from pipelines.web.app import ORT_WEB_CDN, ORT_WEB_FILES, variant_file
from pipelines.web.browser import find_chromium
from storage_kernels.store import Artifact, ArtifactStore
from tests.web.conftest import ort_web  # noqa: F401 - the fixture: onnxruntime-web from npm (or a skip)
from trainer.export_variants import VARIANTS

SETS = ["--set", "sample.epochs=1", "--set", "train.epochs=2", "--set", "train.hidden_dim=16"]
cli = CliRunner()


def _export(root: Path, *extra: str) -> dict[str, Any]:
    result = cli.invoke(app, ["export", "--dataset", "tiny", "--root", str(root), *SETS, "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """(``strata export --web SITE --json`` summary, the data root)."""
    base = tmp_path_factory.mktemp("export-web")
    return _export(base / "root", "--web", str(base / "site")), base / "root"


def _artifact(summary: dict[str, Any], stage: str) -> dict[str, Any]:
    return next(a for a in summary["artifacts"] if a["stage"] == stage)


def test_export_web_copies_a_deployable_folder(exported: tuple[dict[str, Any], Path]) -> None:
    summary, _ = exported
    web = summary["web"]
    site, export = Path(web["dir"]), Path(_artifact(summary, "export")["path"])
    manifest = json.loads((site / "web.json").read_text())
    wanted = {"index.html", "subgraph.json", "subgraph.bin", "web.json", *(variant_file(v) for v in VARIANTS)}
    assert wanted <= set(web["files"]) and "manifest.json" not in web["files"]
    for name in web["files"]:  # byte for byte the export artifact's web folder
        assert (site / name).read_bytes() == (export / name).read_bytes(), name
    assert [v["name"] for v in manifest["variants"]] == list(VARIANTS)
    assert all((site / v["file"]).stat().st_size == v["bytes"] for v in manifest["variants"])
    subgraph = json.loads((site / "subgraph.json").read_text())
    assert subgraph["num_seeds"] > 0
    assert web["dir"] == str(site.resolve()) and web["bundled"] == (web["runtime"] == "ort/")
    if web["runtime"] == "ort/":  # onnxruntime-web from the npm cache: the folder works offline
        assert all((site / "ort" / f).is_file() for f in ORT_WEB_FILES)
        assert web_lines(web)[1] == f"Runtime:    onnxruntime-web bundled in {site.resolve()}/ort/ (the folder " \
            "works offline)"
    else:  # no onnxruntime-web in the npm cache: the page loads it from the CDN
        assert web["runtime"] == ORT_WEB_CDN and not (site / "ort").exists()


def test_export_web_says_where_it_wrote_and_that_the_runtime_is_not_bundled(
        exported: tuple[dict[str, Any], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, root = exported
    empty = tmp_path / "npm"  # an empty npm cache: the page falls back to the CDN, and the command says so
    monkeypatch.setenv("STRATA_NPM_CACHE", str(empty))
    site = tmp_path / "site"
    result = cli.invoke(app, ["export", "--dataset", "tiny", "--root", str(root), *SETS, "--web", str(site)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # rich wraps at the console's width
    assert f"Web app: {site.resolve()} (" in text and f"python -m http.server -d {site.resolve()} 8000" in text
    assert f"NOT bundled (not in the npm cache {empty})" in text and ORT_WEB_CDN in text
    assert "make web-runtime" in " ".join(result.stderr.split()) and not (site / "ort").exists()
    as_json = _export(root, "--web", str(tmp_path / "site2"))  # --json: stdout stays one JSON line
    assert as_json["web"]["bundled"] is False and as_json["web"]["npm_cache"] == str(empty)


@pytest.mark.web
@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_export_screenshot_writes_a_png(exported: tuple[dict[str, Any], Path], ort_web: Path,  # noqa: F811
                                        tmp_path: Path) -> None:
    _, root = exported
    summary = _export(root, "--web", str(tmp_path / "site"), "--screenshot", str(tmp_path / "page.png"),
                      "--variant", "int8")
    assert all(a["reused"] for a in summary["artifacts"])  # nothing rebuilt: the same export, copied again
    assert summary["web"]["runtime"] == "ort/" and summary["web"]["screenshot"] == str(tmp_path / "page.png")
    assert summary["web"]["page_status"].startswith("int8: ") and "/ort/" in summary["web"]["page_status"]
    png = (tmp_path / "page.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def _damaged_copy(exported: tuple[dict[str, Any], Path], tmp_path: Path) -> tuple[Artifact, ArtifactStore]:
    """A copy of the export and its train upstream in a fresh store: (export artifact, store)."""
    summary, root = exported
    for stage in ("train", "export"):
        src = Path(_artifact(summary, stage)["path"])
        shutil.copytree(src, tmp_path / "root" / "tiny" / stage / src.name)
    store = ArtifactStore(tmp_path / "root")
    export = store.open("tiny", "export", _artifact(summary, "export")["version"])
    assert EXPORT_FILES.run(export, store).passed and ONNX_MATCHES_TORCH.run(export, store).passed  # pristine
    return export, store


def test_export_files_fails_on_a_missing_or_truncated_file(exported: tuple[dict[str, Any], Path],
                                                           tmp_path: Path) -> None:
    export, store = _damaged_copy(exported, tmp_path)
    (export.path / "model.int8.onnx").unlink()
    recorded = export.files["subgraph.bin"].bytes
    with (export.path / "subgraph.bin").open("r+b") as f:
        f.truncate(recorded - 4)
    finding = EXPORT_FILES.run(export, store)
    assert not finding.passed
    assert f"'{export.path / 'model.int8.onnx'}' expected a file (got none)" in finding.problems
    assert f"'{export.path / 'subgraph.bin'}' expected {recorded} bytes, more than 0 (got {recorded - 4})" \
        in finding.problems
    (export.path / "model.onnx").unlink()  # the ONNX model itself: its size is no longer what the stats say
    problems = EXPORT_FILES.run(export, store).problems
    assert f"'{export.path / 'model.onnx'}' expected a file (got none)" in problems
    assert f"'stats.onnx_bytes' expected the size of model.onnx None (got {export.stats['onnx_bytes']})" in problems


def test_onnx_matches_torch_fails_on_perturbed_weights(exported: tuple[dict[str, Any], Path],
                                                       tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    export, store = _damaged_copy(exported, tmp_path)
    model = onnx.load(str(export.path / "model.onnx"))
    weights = max((t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT),
                  key=lambda t: int(np.prod(t.dims)))  # the largest weight matrix
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights) + np.float32(0.05), weights.name))
    onnx.save(model, str(export.path / "model.onnx"))
    finding = ONNX_MATCHES_TORCH.run(export, store)
    assert not finding.passed and finding.facts["max_abs_diff"] > ONNX_TOLERANCE
    assert finding.problems == [f"'{export.path / 'model.onnx'}' expected onnxruntime logits within "
                                f"{ONNX_TOLERANCE} of PyTorch (got max |diff| {finding.facts['max_abs_diff']:.3g})"]
