"""Warm start from the registered champion: find it, check its architecture, load its weights.

With ``train.warm_start=champion`` (the retrain schedule and the source sensor set it) the ``train`` stage asks
:func:`find_warm_start` for the version holding the ``champion`` alias of the dataset's registered model
(``export.model_name``, default ``strata-<dataset>``). The champion enters the train artifact's version
(:meth:`Champion.identity`): a retrain on an unchanged source snapshot with an unchanged champion is a lookup
(training is deterministic, so it would only reproduce the same weights and register a duplicate), while a new
snapshot or a moved champion gives a new artifact, trained from the champion's weights.

The weights come from the champion's own ``train`` artifact in the store (its MLflow run's tag
``strata.model_version`` names it), or from that run's ``model/`` files when the artifact was removed, and are
read with ``torch.load(weights_only=True)``. They are loaded only when the architecture matches: the same model
and constructor arguments (``dropout`` aside: it shapes training, not the weights) and every tensor of the same
name and shape. Otherwise training starts from the seeded initialisation and :attr:`WarmStart.reason` says why.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from storage_kernels.store import ArtifactStore

if TYPE_CHECKING:
    import torch

__all__ = ["Champion", "WarmStart", "architecture_mismatch", "find_champion", "find_warm_start",
           "shape_mismatch"]

#: Constructor arguments that do not change the weights (ignored when comparing architectures).
_NOT_ARCHITECTURE = frozenset({"dropout", "architecture"})


@dataclass(frozen=True)
class Champion:
    """The registered model version holding the ``champion`` alias."""

    model_name: str
    version: int  # registry version
    run_id: str  # its MLflow training run
    dataset: str  # the run's tag strata.dataset
    train_version: str  # the run's tag strata.model_version: the train artifact it was trained as

    def identity(self) -> dict[str, Any]:
        """What enters a warm-started train artifact's version."""
        return {"model": self.model_name, "version": self.version, "train": self.train_version}


def find_champion(cfg: PipelineConfig, store: ArtifactStore) -> Champion | None:
    """The champion of ``cfg``'s registered model in the store's MLflow registry (None without one)."""
    from pipelines.tracking.model_registry import model_name_for
    from trainer.tracking import MlflowTracker

    paths = StrataPaths(store.root)
    tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                            experiment=f"strata-{cfg.dataset_name}")
    name = model_name_for(cfg)
    found = tracker.champion(name)
    if found is None:
        return None
    mv = tracker.client.get_model_version(name, str(found[0]))
    tags = tracker.client.get_run(mv.run_id).data.tags
    return Champion(name, found[0], mv.run_id, tags.get("strata.dataset", cfg.dataset_name),
                    tags.get("strata.model_version", ""))


def architecture_mismatch(champion_info: Mapping[str, Any], model_args: Mapping[str, Any]) -> str | None:
    """Why a model built with ``model_args`` cannot start from weights described by ``champion_info`` (the
    champion's ``model.json``), or None when the architectures match."""
    theirs = {k: v for k, v in champion_info.items() if k not in _NOT_ARCHITECTURE}
    ours = {k: v for k, v in model_args.items() if k not in _NOT_ARCHITECTURE}
    if theirs != ours:
        keys = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
        diff = ", ".join(f"{k}: {theirs.get(k)!r} -> {ours.get(k)!r}" for k in keys)
        return f"architecture differs from the champion's ({diff})"
    return None


def shape_mismatch(champion_state: Mapping[str, torch.Tensor], model_state: Mapping[str, torch.Tensor]
                   ) -> str | None:
    """Why ``champion_state`` cannot be loaded into a model whose state is ``model_state`` (None: it can)."""
    if champion_state.keys() != model_state.keys():
        missing = sorted(model_state.keys() - champion_state.keys())
        extra = sorted(champion_state.keys() - model_state.keys())
        return f"weights differ from the champion's by name (missing {missing}, unexpected {extra})"
    for key, value in model_state.items():
        if tuple(champion_state[key].shape) != tuple(value.shape):
            return (f"weight '{key}' expected shape {tuple(value.shape)} (got {tuple(champion_state[key].shape)} "
                    "in the champion)")
    return None


@dataclass
class WarmStart:
    """A ``train(init=...)`` callback loading the champion's weights when the architecture matches.

    After training, :attr:`applied` says whether it did and :attr:`reason` why not.
    """

    champion: Champion
    info: dict[str, Any]  # the champion's model.json
    state_path: Path  # its state_dict.pt
    applied: bool = False
    reason: str = "not called"

    def __call__(self, model: torch.nn.Module, model_args: dict[str, Any]) -> None:
        import torch

        self.applied = False
        mismatch = architecture_mismatch(self.info, model_args)
        state: dict[str, torch.Tensor] = {}
        if mismatch is None:
            state = torch.load(self.state_path, map_location="cpu", weights_only=True)
            mismatch = shape_mismatch(state, model.state_dict())
        if mismatch is not None:
            self.reason = mismatch
            return
        model.load_state_dict(state)
        self.applied, self.reason = True, ""

    @property
    def tag(self) -> str:
        """``warm_start_from``: the champion's registry version, or ``none``."""
        return str(self.champion.version) if self.applied else "none"

    def describe(self) -> str:
        """One log line: where training started from."""
        where = f"{self.champion.model_name} version {self.champion.version} (train {self.champion.train_version})"
        if self.applied:
            return f"warm start from the champion {where}"
        return f"warm start skipped, trained from scratch: {self.reason} [champion {where}]"


def _weights_from_run(champion: Champion, tracking_uri: str, dest: Path) -> tuple[dict[str, Any], Path]:
    """The champion's ``model.json`` and ``state_dict.pt`` from its MLflow run's ``train/`` directory."""
    from mlflow.tracking import MlflowClient  # imported after trainer.tracking set the telemetry switches

    client = MlflowClient(tracking_uri=tracking_uri)
    files = {}
    for name in ("model.json", "state_dict.pt"):
        files[name] = Path(client.download_artifacts(champion.run_id, f"train/{name}", str(dest)))
    return json.loads(files["model.json"].read_text()), files["state_dict.pt"]


def find_warm_start(cfg: PipelineConfig, store: ArtifactStore) -> WarmStart | None:
    """The warm start of a ``train.warm_start=champion`` run: None when no champion is registered yet.

    Raises ``FileNotFoundError`` naming the champion when neither its train artifact nor its MLflow run holds
    its weights.
    """
    champion = find_champion(cfg, store)
    if champion is None:
        return None
    artifact = store.find(champion.dataset, "train", champion.train_version) if champion.train_version else None
    if artifact is not None:
        return WarmStart(champion, artifact.json("model.json"), Path(artifact.file("state_dict.pt")))
    dest = Path(tempfile.mkdtemp(prefix="strata-champion-"))
    try:
        info, state = _weights_from_run(champion, StrataPaths(store.root).mlflow_tracking_uri, dest)
    except Exception as e:
        raise FileNotFoundError(f"'train.warm_start' expected the weights of {champion.model_name} version "
                                f"{champion.version} (train artifact {champion.train_version!r} or run "
                                f"{champion.run_id}'s train/state_dict.pt) (got {type(e).__name__}: {e})") from e
    return WarmStart(champion, info, state)
