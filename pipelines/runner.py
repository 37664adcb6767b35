"""Run the stage graph without Dagster: resolve a stage's artifact for one configuration.

A :class:`StageRunner` answers "the artifact of stage S for this configuration" by calling the stage function
with the artifacts of S's upstream stages, resolved the same way. Artifacts are content-addressed (version =
hash of stage, format version, parameters and upstream versions), so for a stage that already ran this is a
lookup (``reused=True``); a missing one is built. Results are memoized in the runner (one runner, one run):
nothing is shared between processes, so Dagster's multiprocess executor can resolve independent steps in
parallel, each in its own process.

The Dagster steps of one run share the run resource's runner within a process
(:meth:`pipelines.orchestration.resources.StrataResource.runner`); the benchmarks use one directly (``run_until``,
which also runs each stage's checks and stops at the first failing one). A reused artifact's checks that passed
on it before are not run again (:mod:`pipelines.checks.record`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipelines.checks import Finding, StageCheck, quarantine_failed
from pipelines.checks.record import record_passed, recorded_passes
from pipelines.config import PipelineConfig
from pipelines.core.progress import Progress
from pipelines.graph import RUN_STAGE_NAMES, STAGES, Stage, get_stage, until
from pipelines.stages.common import StageResult
from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["CheckFailed", "StageRunner"]


class CheckFailed(RuntimeError):
    """A blocking check of ``stage`` failed on its artifact; nothing downstream was built. A content check's
    artifact was quarantined (``moved_to``: where it went), so the next run rebuilds it."""

    def __init__(self, stage: str, check: str, artifact: Artifact, problem: str, moved_to: Path | None = None
                 ) -> None:
        moved = f" (quarantined to {moved_to}; the next run rebuilds it)" if moved_to is not None else ""
        super().__init__(f"check '{stage}:{check}' failed on {artifact.path}: {problem}{moved}")
        self.stage, self.check, self.artifact, self.problem = stage, check, artifact, problem
        self.moved_to = moved_to


@dataclass(frozen=True)
class CheckOutcome:
    stage: str
    check: StageCheck
    finding: Finding


class StageRunner:
    """Resolves (reuses or builds) the artifacts of one configuration's stages.

    ``on_upstream_built(stage, result)`` is called when resolving an *upstream* stage had to build it (a
    Dagster step then warns that the artifact was produced outside its own asset).
    """

    def __init__(self, cfg: PipelineConfig, store: ArtifactStore,
                 on_upstream_built: Callable[[str, StageResult], None] | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.on_upstream_built = on_upstream_built
        self._results: dict[str, StageResult] = {}

    def derive(self, cfg: PipelineConfig) -> StageRunner:
        """A runner for ``cfg`` that keeps this runner's results of the stages ``cfg`` leaves unchanged: same
        dataset, same artifact parameters, every upstream stage kept (a benchmark varying only the policy
        resolves ingest .. sample once)."""
        from pipelines.config import artifact_params

        derived = StageRunner(cfg, self.store, self.on_upstream_built)
        for stage in STAGES:
            if (stage.name in self._results and cfg.dataset == self.cfg.dataset
                    and all(u in derived._results for u in stage.upstream)
                    and artifact_params(cfg, stage.name, stage.also_reads)
                    == artifact_params(self.cfg, stage.name, stage.also_reads)):
                derived._results[stage.name] = self._results[stage.name]
        return derived

    def result(self, name: str, progress: Progress | None = None) -> StageResult:
        """Run (or look up) stage ``name``: ``stage.run(store, cfg, **upstream artifacts, progress)``."""
        if name in self._results:
            return self._results[name]
        stage = get_stage(name)
        upstream = {u: self.artifact(u) for u in stage.upstream}
        result = stage.run(self.store, self.cfg, progress=progress, **upstream)
        self._results[name] = result
        return result

    def artifact(self, name: str) -> Artifact:
        """The artifact of an upstream stage ``name`` for this configuration (built when missing)."""
        known = name in self._results
        result = self.result(name)
        if not known and not result.reused and self.on_upstream_built is not None:
            self.on_upstream_built(name, result)
        return result.artifact

    def check(self, name: str) -> list[CheckOutcome]:
        """Run every check of stage ``name`` on its artifact; when the artifact was reused and verified against its
        manifest (``verify.on_reuse`` not ``off``), a check recorded as passed on it by the same check code is not
        run again (:mod:`pipelines.checks.record`)."""
        return [CheckOutcome(name, c, self.check_one(name, c)) for c in get_stage(name).checks]

    def check_one(self, name: str, check: StageCheck, artifact: Artifact | None = None) -> Finding:
        """``check``'s finding on stage ``name``'s artifact (or on ``artifact``, a quarantined copy of it): its pass
        on record when the artifact was reused, else a fresh run, whose pass is then recorded."""
        own = self.artifact(name)
        target = artifact if artifact is not None else own
        verified = self.cfg.verify.on_reuse != "off"  # the bytes the pass was recorded on were checked on reuse
        if (target is own and verified and self.result(name).reused
                and check.name in recorded_passes(self.store.root, own)):
            return Finding(facts={"recorded_pass": True})
        finding = check.run(target, self.store)
        if finding.passed and target is own:
            record_passed(self.store.root, own, [check.name])
        return finding

    def run_until(self, name: str = RUN_STAGE_NAMES[-1], progress: Callable[[Stage], Progress | None] | None = None,
                  checks: bool = True) -> list[StageResult]:
        """Every stage up to and including ``name``, in order; with ``checks``, each stage's checks run after it
        and the first failing one raises :class:`CheckFailed` (nothing downstream is built; a content check's
        artifact is quarantined first)."""
        results = []
        for stage in until(name):
            results.append(self.result(stage.name, progress(stage) if progress else None))
            if checks:
                for outcome in self.check(stage.name):
                    if not outcome.finding.passed:
                        artifact, problem = self._results[stage.name].artifact, outcome.finding.problems[0]
                        moved = (quarantine_failed(artifact, self.store, outcome.check.name, problem)
                                 if outcome.check.quarantine else None)
                        if moved is not None:
                            del self._results[stage.name]  # gone: this runner must not hand it out again
                        raise CheckFailed(stage.name, outcome.check.name, artifact, problem, moved)
        return results
