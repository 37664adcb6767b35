"""The trained model as an MLflow model: a pyfunc over the ``state_dict`` plus the ONNX flavor, in one directory.

``save_mlflow_model`` writes a directory MLflow's loaders read (``MLmodel`` with two flavors):

- ``python_function``: :class:`GraphPyfunc`, a models-from-code pyfunc (the entry file
  ``trainer/mlflow_pyfunc.py`` is copied in; nothing is pickled) that rebuilds the network from ``model.json``
  and ``state_dict.pt`` (``torch.load(weights_only=True)``) and runs it with PyTorch on the CPU;
- ``onnx``: the exported ``model.onnx`` (``mlflow.onnx.load_model`` returns the ``onnx.ModelProto``).

Both take the same input, the ONNX graph's (``trainer.export``): a dict of arrays ``x`` (num_nodes, in_dim)
float32 and, per layer ``i`` (input layer first), ``edge_src_i`` / ``edge_dst_i`` (num_edges_i,) int64 and
``dst_pos_i`` (num_dst_i,) int64 -- one sampled subgraph, seeds first (``trainer.export.onnx_feed(x, blocks)``
builds it from a loaded batch). The pyfunc returns ``{"logits": (num_seeds, out_dim) float32}``; the input
example is a small subgraph.

The pyfunc also predicts by node id, reading the data root (:mod:`trainer.node_predictions`): a pandas frame
(or a dict) with a column ``node_id`` (the source's ids, or a named graph's names) returns a frame ``node_id``,
``predicted_class``, ``probability``, ``embedding`` (the logits), full neighbourhood, one row per id. The root
is ``params={"root": ...}``, else ``$STRATA_HOME``, else the root the model was registered from (its model config
``strata_root``, beside ``strata_dataset`` and ``strata_train_version``). Since the two inputs differ, the
signature declares the params only (``root``, ``memory_mb``); the pyfunc checks the subgraph input itself.

The loader imports ``trainer``: load the model in Strata's environment (``pip install -e .``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trainer.tracking import _mlflow

_mlflow()  # telemetry off before the first mlflow import
from mlflow.pyfunc import PythonModel  # noqa: E402

__all__ = ["ENTRY_FILE", "GraphPyfunc", "input_example", "model_signature", "save_mlflow_model", "set_entry_model"]

#: The models-from-code entry file MLflow copies into the model directory.
ENTRY_FILE = Path(__file__).with_name("mlflow_pyfunc.py")
#: Names of the pyfunc's artifacts inside the MLflow model (``context.artifacts`` keys).
STATE_DICT, MODEL_JSON = "state_dict", "model_json"
ONNX_FILE = "model.onnx"


def _input_names(num_layers: int) -> list[str]:
    from trainer.export import onnx_input_names

    return onnx_input_names(num_layers)


class GraphPyfunc(PythonModel):
    """MLflow pyfunc of a Strata model: ``predict({"x": ..., "edge_src_0": ..., ...}) -> {"logits": ...}``."""

    # MLflow's type-hint validation takes list[...] of records (and warns on every load without one); this
    # model takes one dict of tensors, which the tensor signature validates instead (PyFuncModel.predict).
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        """Rebuild the network from the model's ``model.json`` and ``state_dict.pt`` (weights only)."""
        from trainer.models import load_trained

        info = json.loads(Path(context.artifacts[MODEL_JSON]).read_text())
        self.net = load_trained(info, context.artifacts[STATE_DICT])
        self.names = _input_names(self.net.num_layers)
        self.config = dict(getattr(context, "model_config", None) or {})

    # model_input (a Mapping[str, np.ndarray]) is left unannotated: MLflow reads a predict's input hint as a
    # list[...] of records and warns at every save that a Mapping is not one.
    def predict(self, context: Any, model_input, params: dict[str, Any] | None = None) -> Any:
        """Logits of the subgraph's seeds (``model_input`` maps the ONNX input names to arrays), or, for an input
        with a ``node_id`` column, the frame of :func:`trainer.node_predictions.predict_nodes`."""
        import torch

        if _node_ids(model_input) is not None:
            return self._predict_nodes(_node_ids(model_input), params or {})
        if not isinstance(model_input, Mapping) or any(n not in model_input for n in self.names):
            got = sorted(model_input) if isinstance(model_input, Mapping) else type(model_input).__name__
            raise ValueError(f"'model_input' expected a dict of arrays {self.names} (got {got})")
        x = torch.as_tensor(np.asarray(model_input["x"], dtype=np.float32))
        edges = [tuple(torch.as_tensor(np.asarray(model_input[f"{k}_{i}"], dtype=np.int64))
                       for k in ("edge_src", "edge_dst", "dst_pos")) for i in range(self.net.num_layers)]
        with torch.no_grad():
            logits = self.net.forward_dst_pos(x, edges)  # (num_seeds, out_dim)
        return {"logits": logits.numpy()}

    def _predict_nodes(self, node_ids: list[Any], params: Mapping[str, Any]) -> Any:
        from trainer.node_predictions import predict_nodes

        root = params.get("root") or os.environ.get("STRATA_HOME") or self.config.get("strata_root")
        dataset, version = self.config.get("strata_dataset"), self.config.get("strata_train_version")
        if not root or not dataset or not version:
            raise ValueError("'node_id' input expected a model registered by Strata's export (model config "
                             f"strata_dataset, strata_train_version) and a data root (got root={root!r}, "
                             f"dataset={dataset!r}, train version={version!r}): pass params={{'root': DATA_ROOT}}")
        memory = int(params.get("memory_mb") or 256) << 20
        return predict_nodes(self.net, root, str(dataset), str(version), node_ids, memory_bytes=memory)


def _node_ids(model_input: Any) -> list[Any] | None:
    """The ``node_id`` column of a pandas frame or a dict holding only it (None for a subgraph input)."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame) and "node_id" in model_input.columns:
        return model_input["node_id"].tolist()
    if isinstance(model_input, Mapping) and set(model_input) == {"node_id"}:
        return np.asarray(model_input["node_id"]).tolist()
    return None


def set_entry_model() -> None:
    """Hand MLflow the pyfunc instance (called by the models-from-code entry file on load)."""
    from mlflow.models import set_model

    set_model(GraphPyfunc())


def model_signature() -> Any:
    """The ``ModelSignature``: the params of a prediction by node id (``root``: the data root, '' for the default;
    ``memory_mb``: layer-wise inference's memory). No input schema: the pyfunc takes a subgraph (a dict of
    tensors) or a ``node_id`` column, and checks either itself (MLflow would refuse one of them)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ParamSchema, ParamSpec

    return ModelSignature(params=ParamSchema([ParamSpec("root", "string", ""), ParamSpec("memory_mb", "long", 256)]))


def input_example(in_dim: int, num_layers: int, num_seeds: int = 4, fanout: int = 3,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """A small layered subgraph in the model's input format (``trainer.export.random_subgraph``)."""
    from trainer.export import onnx_feed, random_subgraph

    x, blocks = random_subgraph(in_dim, num_layers, num_seeds=num_seeds, fanout=fanout, seed=seed)
    return onnx_feed(x, blocks)


def _requirements() -> list[str]:
    import mlflow
    import onnx
    import onnxruntime
    import torch

    return [f"mlflow=={mlflow.__version__}", f"torch=={torch.__version__.split('+')[0]}",
            f"numpy=={np.__version__}", f"onnx=={onnx.__version__}", f"onnxruntime=={onnxruntime.__version__}"]


def save_mlflow_model(path: str | Path, *, model_json: str | Path, state_dict: str | Path, onnx_path: str | Path,
                      example: Mapping[str, np.ndarray] | None = None, mlflow_model: Any = None,
                      metadata: Mapping[str, Any] | None = None, model_config: Mapping[str, Any] | None = None
                      ) -> Path:
    """Write the MLflow model directory at ``path`` (must not exist): pyfunc + ONNX flavor, signature, example.

    ``mlflow_model`` is the ``mlflow.models.Model`` to fill (one created by a logged model carries its id);
    ``example`` defaults to :func:`input_example` for the network's dimensions; ``model_config`` (``strata_root``,
    ``strata_dataset``, ``strata_train_version``) lets the pyfunc predict by node id from the store.
    """
    import mlflow
    import onnx

    info = json.loads(Path(model_json).read_text())
    for key in ("in_dim", "num_layers", "out_dim"):
        if not isinstance(info.get(key), int):
            raise ValueError(f"'{model_json}' expected an integer '{key}' (got {info.get(key)!r})")
    in_dim, num_layers = info["in_dim"], info["num_layers"]  # out_dim checked above: the ONNX flavor has it
    example = dict(example) if example is not None else input_example(in_dim, num_layers)
    path = Path(path)
    mlflow.pyfunc.save_model(
        str(path),
        python_model=str(ENTRY_FILE),
        artifacts={STATE_DICT: str(state_dict), MODEL_JSON: str(model_json)},
        signature=model_signature(),
        input_example=example,
        pip_requirements=_requirements(),  # explicit: inferring them would load the model in a subprocess
        mlflow_model=mlflow_model,
        # the subgraph input's names (the signature declares none: it also takes a node_id column)
        metadata={**(dict(metadata) if metadata else {}), "strata_subgraph_inputs": _input_names(num_layers)},
        model_config=dict(model_config) if model_config else None,
    )
    # the ONNX flavor beside the pyfunc: same directory, same signature and example
    shutil.copyfile(onnx_path, path / ONNX_FILE)
    model = mlflow.models.Model.load(str(path / "MLmodel"))
    model.add_flavor("onnx", onnx_version=onnx.__version__, data=ONNX_FILE, providers=["CPUExecutionProvider"],
                     onnx_session_options=None, code=None)
    model.model_size_bytes = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    model.save(str(path / "MLmodel"))
    return path
