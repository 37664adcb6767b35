"""The MLflow model of a trained network: pyfunc (PyTorch) and ONNX flavors in one directory, with a signature
and an input example, loaded back with MLflow's own loaders (through the registry: ``test_tracking.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainer.export import export_onnx, onnx_feed, random_subgraph
from trainer.mlflow_model import input_example, save_mlflow_model
from trainer.models import build_model

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore:.*TracerWarning")

ARGS = {"in_dim": 6, "hidden_dim": 8, "out_dim": 3, "num_layers": 2, "dropout": 0.0}


def trained_files(tmp: Path, name: str) -> dict[str, Path]:
    torch.manual_seed(3)
    net = build_model(name, **ARGS).eval()
    tmp.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), tmp / "state_dict.pt")
    (tmp / "model.json").write_text(json.dumps({"architecture": name, "model": name, **ARGS}))
    export_onnx(net, tmp / "model.onnx")
    return {"model_json": tmp / "model.json", "state_dict": tmp / "state_dict.pt", "onnx_path": tmp / "model.onnx",
            "net": net}


def torch_logits(net: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    x = torch.from_numpy(feed["x"])
    edges = [tuple(torch.from_numpy(feed[f"{k}_{i}"]) for k in ("edge_src", "edge_dst", "dst_pos"))
             for i in range(net.num_layers)]
    with torch.no_grad():
        return net.forward_dst_pos(x, edges).numpy()


@pytest.mark.parametrize("architecture", ["graphsage", "gcn"])
def test_saved_model_loads_with_both_flavors(tmp_path: Path, architecture: str) -> None:
    import mlflow
    import onnxruntime as ort

    files = trained_files(tmp_path / "train", architecture)
    net = files.pop("net")
    path = save_mlflow_model(tmp_path / "mlflow-model", **files)
    names = {p.name for p in path.iterdir()}
    assert {"MLmodel", "model.onnx", "mlflow_pyfunc.py", "input_example.json", "artifacts"} <= names
    assert not list(path.rglob("*.pkl"))  # models from code: nothing pickled

    pyfunc = mlflow.pyfunc.load_model(str(path))
    assert set(pyfunc.metadata.flavors) == {"python_function", "onnx"}
    # no input schema (a subgraph or a node_id column): the params of a prediction by node id
    assert pyfunc.metadata.get_input_schema() is None
    assert [p.name for p in pyfunc.metadata.get_params_schema().params] == ["root", "memory_mb"]
    example = pyfunc.input_example
    assert set(example) == {"x", "edge_src_0", "edge_dst_0", "dst_pos_0", "edge_src_1", "edge_dst_1", "dst_pos_1"}
    np.testing.assert_array_equal(example["x"], input_example(6, 2)["x"])

    # a subgraph of another size than the example's: every first axis is dynamic
    feed = onnx_feed(*random_subgraph(6, 2, num_seeds=9, fanout=4, seed=5))
    logits = pyfunc.predict(feed)["logits"]
    assert logits.shape == (9, 3) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, torch_logits(net, feed), rtol=0, atol=1e-6)

    proto = mlflow.onnx.load_model(str(path))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["logits"], feed)[0], logits, rtol=0, atol=1e-4)

    with pytest.raises(Exception, match="edge_src_1"):  # the pyfunc names the missing input
        pyfunc.predict({k: v for k, v in feed.items() if k != "edge_src_1"})


def test_model_json_must_name_the_dimensions(tmp_path: Path) -> None:
    files = trained_files(tmp_path / "train", "graphsage")
    files.pop("net")
    files["model_json"].write_text(json.dumps({"model": "graphsage", "in_dim": 6, "hidden_dim": 8}))
    with pytest.raises(ValueError, match=r"model.json' expected an integer 'num_layers' \(got None\)"):
        save_mlflow_model(tmp_path / "out", **files)
