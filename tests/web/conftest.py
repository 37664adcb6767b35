"""Shared fixtures of the browser-app tests: a trained model's web folder (built as the export stage builds
it, without MLflow), onnxruntime-web from the npm registry in Strata's npm cache, and Node / Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact

DATASET = "synthetic:nodes=800,degree=8,dim=16,classes=4,seed=0,homophily=0.9"


@dataclass
class WebExport:
    """A published web folder (``artifact``) and the PyTorch model it was exported from."""

    artifact: Artifact
    model: torch.nn.Module
    val_acc: float  # the trainer's own evaluation of the best weights
    upstream: dict[str, Artifact]  # reorder and sample, what build_web reads
    store: Any


@pytest.fixture(scope="session")
def web_export(tmp_path_factory: pytest.TempPathFactory) -> WebExport:
    from pipelines.web.app import build_web
    from trainer.config import TrainConfig
    from trainer.export import export_onnx
    from trainer.features import InMemoryFeatures
    from trainer.models import build_model
    from trainer.train import train

    cfg = PipelineConfig.load(dataset=DATASET, overrides=["sample.epochs=1", "sample.fanouts=[5,5]"])
    store = StrataPaths.at(tmp_path_factory.mktemp("web-root")).store()
    results = {r.artifact.stage: r.artifact for r in StageRunner(cfg, store).run_until("sample")}
    reorder, sample = results["reorder"], results["sample"]
    labels = np.asarray(reorder.array("labels.npy"), dtype=np.int64)
    features = np.asarray(reorder.array("features.npy"))
    torch.manual_seed(0)
    result = train(TrainConfig(hidden_dim=32, epochs=8, seed=0, device="cpu"), SampleSet(sample.path),
                   InMemoryFeatures(features), labels)
    model = build_model(**result.model_args)
    model.load_state_dict(result.best_state_dict)
    model.eval()
    with store.builder(cfg.dataset_name, "export", "webtest", {}, {}) as builder:
        onnx_path = export_onnx(model, builder.add_file("model.onnx"))
        builder.stats.update(build_web(builder, onnx_path, reorder=reorder, sample=sample, web_seeds=1000,
                                       calibration_batches=2, about={"dataset": cfg.dataset_name,
                                                                     "model_name": "web-test",
                                                                     "architecture": "graphsage"}))
        artifact = builder.publish()
    return WebExport(artifact, model, float(result.val_acc), {"reorder": reorder, "sample": sample}, store)


@pytest.fixture(scope="session")
def ort_web() -> Path:
    """onnxruntime-web (the pinned version) in Strata's npm cache, installed from the npm registry once."""
    from pipelines.web.app import ORT_WEB_VERSION, npm_cache_dir, ort_web_dir

    if shutil.which("node") is None:
        pytest.skip("node is not on PATH (the onnxruntime-web tests need Node.js)")
    found = ort_web_dir()
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on PATH and onnxruntime-web is not in the npm cache")
    cache = npm_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run([npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund",
                               f"onnxruntime-web@{ORT_WEB_VERSION}"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:  # a broken npm or an unreachable registry: not our bug
        pytest.skip(f"npm install onnxruntime-web@{ORT_WEB_VERSION} did not finish (offline?): {e}")
    found = ort_web_dir()
    if proc.returncode != 0 or found is None:
        pytest.skip(f"npm install onnxruntime-web@{ORT_WEB_VERSION} failed (offline?): {proc.stderr.strip()[-300:]}")
    return found


def node_predict(ort_dir: Path, subgraph_json: Path, models: list[Path]) -> dict:
    """Run ``tests/web/node_predict.mjs``: the page's code in Node with onnxruntime-web (WASM)."""
    script = Path(__file__).with_name("node_predict.mjs")
    proc = subprocess.run(["node", str(script), str(ort_dir), str(subgraph_json), *map(str, models)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
