"""The model registry as ``strata models`` sees it: versions with aliases and validation accuracy, promotion.

Reads and writes through an ``MlflowClient`` bound to one tracking URI (no global MLflow state). The gate
:func:`promote` applies is the export stage's (``MlflowTracker.register``): a version becomes ``champion``
only when its validation accuracy (version tag ``val_acc``) beats the current champion's; ``force`` skips it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.tracking import CHAMPION, VAL_ACC_TAG, _mlflow

__all__ = ["ModelVersionInfo", "PromotionRefused", "get_version", "list_versions", "promote", "registry_client"]


class PromotionRefused(ValueError):
    """The gate refused a promotion (the version does not beat the champion)."""


@dataclass(frozen=True)
class ModelVersionInfo:
    """One registered model version."""

    name: str
    version: int
    aliases: list[str] = field(default_factory=list)
    val_acc: float = math.nan
    run_id: str | None = None
    source: str = ""
    created_ms: int = 0
    status: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        """``models:/NAME/VERSION``, what MLflow's loaders take."""
        return f"models:/{self.name}/{self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "uri": self.uri, "val_acc": None if math.isnan(self.val_acc) else self.val_acc}


def registry_client(tracking_uri: str) -> Any:
    """An ``MlflowClient`` for the tracking store and registry at ``tracking_uri``."""
    _mlflow()
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def _info(mv: Any, aliases: list[str] | None = None) -> ModelVersionInfo:
    try:
        val_acc = float(mv.tags.get(VAL_ACC_TAG, "nan"))
    except ValueError:
        val_acc = math.nan
    aliases = sorted(aliases if aliases is not None else (mv.aliases or []))
    return ModelVersionInfo(name=mv.name, version=int(mv.version), aliases=aliases,
                            val_acc=val_acc, run_id=mv.run_id, source=mv.source or "",
                            created_ms=int(mv.creation_timestamp or 0), status=str(mv.status or ""),
                            tags=dict(mv.tags or {}))


def list_versions(client: Any, name: str | None = None) -> list[ModelVersionInfo]:
    """Every version of every registered model (or of ``name``), by model name then version."""
    filter_string = f"name = '{name}'" if name else None
    # a version search does not fill aliases: they come from the registered models
    aliases: dict[tuple[str, int], list[str]] = {}
    for model in _all_pages(client.search_registered_models, filter_string):
        for alias, version in (model.aliases or {}).items():
            aliases.setdefault((model.name, int(version)), []).append(alias)
    versions = [_info(mv, aliases.get((mv.name, int(mv.version)), []))
                for mv in _all_pages(client.search_model_versions, filter_string)]
    return sorted(versions, key=lambda v: (v.name, v.version))


def _all_pages(search: Any, filter_string: str | None) -> list[Any]:
    out: list[Any] = []
    token = None
    while True:
        page = search(filter_string=filter_string, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def get_version(client: Any, name: str, ref: str | None = None) -> ModelVersionInfo:
    """Version ``ref`` of ``name``: a number, ``@alias``, or None for the champion (else the newest)."""
    from mlflow.exceptions import MlflowException

    try:
        if ref is None:
            versions = list_versions(client, name)
            if not versions:
                raise ValueError(f"'model' expected a registered model named {name!r} (got none; see "
                                 "`strata models ls`)")
            champion = [v for v in versions if CHAMPION in v.aliases]
            return champion[0] if champion else versions[-1]
        if ref.startswith("@"):
            return _info(client.get_model_version_by_alias(name, ref[1:]))
        if not ref.isdigit():
            raise ValueError(f"'version' expected a number or @alias (got {ref!r})")
        version = int(ref)
        found = [v for v in list_versions(client, name) if v.version == version]
        return found[0] if found else _info(client.get_model_version(name, ref))
    except MlflowException as e:
        raise ValueError(f"'model' expected {name!r} version {ref or CHAMPION} in the registry (got "
                         f"{e.message.splitlines()[0]})") from e


def promote(client: Any, name: str, version: int, force: bool = False) -> int | None:
    """Move ``champion`` to ``version`` of ``name``; returns the previous champion's version (None: none).

    Refused (:class:`PromotionRefused`) unless the version's validation accuracy beats the champion's, or
    ``force``.
    """
    target = get_version(client, name, str(version))
    current = [v for v in list_versions(client, name) if CHAMPION in v.aliases]
    previous = current[0] if current else None
    if previous is not None and previous.version == target.version:
        return previous.version
    if previous is not None and not force and not target.val_acc > previous.val_acc:
        raise PromotionRefused(
            f"'{name}' version {target.version} expected a validation accuracy above the champion's "
            f"(version {previous.version}: {previous.val_acc:.4f}) (got {target.val_acc:.4f}; --force promotes "
            "anyway)")
    client.set_registered_model_alias(name, CHAMPION, str(target.version))
    return previous.version if previous is not None else None
