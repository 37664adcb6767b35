"""The content checks ``strata verify`` runs beside the checksums: the invariants a run checks on each artifact.

A checksum proves a file is what was published; it cannot see a NaN that was there when the manifest was
written (a hand-edited file re-digested, a bug upstream of the digest). The blocking checks of the stage graph
can (``features_finite``, ranges, coverage), and a run quarantines an artifact that fails one. ``verify``
runs the same ones, so ``--repair`` quarantines such an artifact too. The checks live above this layer, in the
stage graph: it registers each stage's content checks in :data:`CONTENT_CHECKS` (the provider
:mod:`pipelines.graph`, imported on the first lookup).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from storage_kernels.integrity import FileCheck
from storage_kernels.registry import Registry
from storage_kernels.store import Artifact, ArtifactStore
from storage_kernels.storefs import MANIFEST_NAME

__all__ = ["CONTENT_CHECKS", "ContentCheck", "LookingStore", "content_checks"]

#: ``(artifact, store) -> [(check name, problem), ...]``: the content checks of one stage that failed.
ContentCheck = Callable[[Artifact, ArtifactStore], list[tuple[str, str]]]

#: Each stage's content checks, by stage name (registered by :mod:`pipelines.graph`).
CONTENT_CHECKS: Registry[ContentCheck] = Registry("verify content check", provider="pipelines.graph")


class LookingStore(ArtifactStore):
    """The store as ``verify`` sees it: no catalog, and finding an upstream artifact does not mark it used
    (``strata gc`` keeps versions by their last use, and a look is no use)."""

    def __init__(self, root: str | Path) -> None:
        super().__init__(root, catalog=False)

    def find(self, dataset: str, stage: str, version: str) -> Artifact | None:
        path = self.path(dataset, stage, version)
        return Artifact(path) if (path / MANIFEST_NAME).is_file() else None


def content_checks(artifact: Artifact, store: ArtifactStore) -> list[FileCheck]:
    """``artifact``'s failed content checks as ``bad`` entries (``checked="invariant"``, the check's problem as
    ``actual``); none for a stage without checks (old stage names). A check that cannot run (an upstream artifact
    removed, say) gives one ``unverifiable`` entry instead: verify reports, it never stops on one artifact."""
    if artifact.stage not in CONTENT_CHECKS:
        return []
    try:
        failed = CONTENT_CHECKS.get(artifact.stage)(artifact, store)
    except Exception as e:  # any failure to check is reported on this artifact's row
        return [FileCheck(f"{artifact.stage} checks", "unverifiable", "invariant",
                          detail=f"{type(e).__name__}: {str(e)[:200]}")]
    return [FileCheck(f"{artifact.stage}:{name}", "bad", "invariant", actual=problem) for name, problem in failed]
