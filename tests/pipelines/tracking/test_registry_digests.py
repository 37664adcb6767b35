"""The MLflow copies of registered models are checked: a flipped byte in a registered ``model.onnx`` (or in a run's
export file, or a file slipped into the model folder) is found by ``strata verify`` (BAD, naming the file and
both digests, exit 1) and refused by ``strata models export`` (one line, exit 2, nothing written); a version
registered before digests is reported unverified, not failed.

One ``tiny`` run through ``export`` per module; the cases run in order on its registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from pipelines.tracking.registry_digests import DIGESTS_TAG, UNVERIFIED, location, recorded
from storage_kernels.arrays import file_checksum

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore:.*TracerWarning")

MODEL = "strata-tiny"
CFG = PipelineConfig.load(overrides=["sample.epochs=1", "train.epochs=2", "train.device=cpu"], dataset="tiny")
cli = CliRunner()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A ``tiny`` root through ``export``: its registry client, version 1 and where its files are stored."""
    from trainer.model_versions import registry_client

    root = tmp_path_factory.mktemp("root")
    StageRunner(CFG, StrataPaths.at(root).store()).run_until("export", checks=False)
    client = registry_client(StrataPaths.at(root).mlflow_tracking_uri)
    mv = client.get_model_version(MODEL, "1")
    run_root = location(client.get_run(mv.run_id).info.artifact_uri)
    return {"root": root, "client": client, "mv": mv, "source": Path(location(mv.source)), "run": Path(run_root)}


def _verify(root: Path) -> tuple[int, dict[str, Any]]:
    result = cli.invoke(app, ["verify", "--root", str(root), "--json"])
    return result.exit_code, json.loads(result.stdout)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_every_logged_file_has_a_digest_and_verifies(registry: dict[str, Any], tmp_path: Path) -> None:
    record = recorded(registry["mv"].tags)
    assert record is not None
    stored = sorted(p.relative_to(registry["source"]).as_posix() for p in registry["source"].rglob("*") if p.is_file())
    assert sorted(record["source"]) == stored and "model.onnx" in stored and "MLmodel" in stored
    assert "export/model.onnx" in record["run"]
    for name, digest in record["run"].items():
        assert file_checksum(registry["run"] / name) == digest, name
    code, report = _verify(registry["root"])
    assert code == 0 and report["bad"] == 0
    assert [(r["model"], r["version"], r["status"]) for r in report["registry"]] == [(MODEL, 1, "OK")]
    exported = cli.invoke(app, ["models", "export", MODEL, str(tmp_path / "out"), "--root", str(registry["root"])])
    assert exported.exit_code == 0, exported.output
    assert "checked against its digests" in exported.stdout


def test_a_version_registered_before_digests_is_unverified_not_failed(registry: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    from trainer.tracking import MlflowTracker

    tracker = MlflowTracker(StrataPaths.at(registry["root"]).mlflow_tracking_uri, experiment="strata-tiny")
    model_id = registry["client"].get_run(registry["mv"].run_id).outputs.model_outputs[0].model_id
    assert tracker.register(registry["mv"].run_id, MODEL, None, 0.0, model_id=model_id)[0] == 2  # no digests tag
    code, report = _verify(registry["root"])
    assert code == 0 and report["models"] == {"versions": 2, "ok": 1, "bad": 0, "unverified": 1}
    assert report["registry"][1]["problem"] == UNVERIFIED == "unverified (registered before digests)"
    exported = cli.invoke(app, ["models", "export", MODEL, str(tmp_path / "v2"), "--version", "2",
                                "--root", str(registry["root"])])
    assert exported.exit_code == 0 and UNVERIFIED in exported.stdout


def test_a_flipped_byte_in_the_registered_onnx_is_found_and_refused(registry: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    onnx = registry["source"] / "model.onnx"
    expected = recorded(registry["mv"].tags)["source"]["model.onnx"]  # type: ignore[index]
    _flip(onnx)
    line = f"'{onnx}' expected checksum {expected} (got {file_checksum(onnx)})"
    code, report = _verify(registry["root"])
    assert code == 1 and report["bad"] == 0  # the store's own export artifact is intact
    assert report["registry"][0]["status"] == "BAD" and report["registry"][0]["problem"] == line
    plain = cli.invoke(app, ["verify", "--root", str(registry["root"])])
    assert plain.exit_code == 1 and "BAD" in plain.stdout
    for extra in ([], ["--onnx"]):
        out = tmp_path / f"out{len(extra)}"
        refused = cli.invoke(app, ["models", "export", MODEL, str(out), "--root", str(registry["root"]), *extra])
        assert refused.exit_code == 2, refused.output
        assert refused.stderr.strip().splitlines() == [f"error: {line}: the registered copy of models:/{MODEL}/1 is "
                                                       "not what was logged; nothing exported (`strata verify` "
                                                       "checks every version)"]
        assert not out.exists()
    _flip(onnx)  # flipped back: the same bytes as logged
    assert file_checksum(onnx) == expected


def test_a_changed_run_export_file_and_an_unlogged_file_are_found(registry: dict[str, Any], tmp_path: Path) -> None:
    record = recorded(registry["mv"].tags)
    assert record is not None
    variant = next(name for name in sorted(record["run"]) if name != "export/model.onnx")  # fp16 or int8
    _flip(registry["run"] / variant)
    slipped = registry["source"] / "extra.bin"
    slipped.write_bytes(b"not logged")
    code, report = _verify(registry["root"])
    problems = report["registry"][0]["problems"]
    assert code == 1 and report["registry"][0]["problem"].endswith("(and 1 more)")
    assert problems == [
        f"'{slipped}' expected no file (none was logged there) (got a file with checksum {file_checksum(slipped)})",
        f"'{registry['run'] / variant}' expected checksum {record['run'][variant]} "
        f"(got {file_checksum(registry['run'] / variant)})"]
    # --onnx hands out model.onnx only, which is intact; the whole folder holds the unlogged file
    onnx_only = cli.invoke(app, ["models", "export", MODEL, str(tmp_path / "onnx"), "--onnx",
                                 "--root", str(registry["root"])])
    assert onnx_only.exit_code == 0, onnx_only.output
    folder = cli.invoke(app, ["models", "export", MODEL, str(tmp_path / "all"), "--root", str(registry["root"])])
    assert folder.exit_code == 2 and "extra.bin' expected no file" in folder.stderr


def test_a_damaged_digest_record_is_refused() -> None:
    with pytest.raises(ValueError, match=f"'{DIGESTS_TAG}' expected a format-1 JSON record"):
        recorded({DIGESTS_TAG: "{not json"})
    assert recorded({}) is None
