"""``strata verify``: re-checksum every published artifact, report OK/BAD/UNVERIFIABLE, quarantine with --repair.

Artifacts are found from the manifests on disk (``<root>/<dataset>/<stage>/<version>/manifest.json``), not the
catalog, so an artifact the catalog lost is checked too. Files are hashed by a thread pool (hashlib releases
the GIL), all files of all artifacts in one queue, with a rich progress bar over bytes. In ``full`` mode the
artifacts whose files match then get the content checks a run gives them (:mod:`pipelines.ops.content`: NaN
features, ranges, coverage), so an artifact published with bad values is BAD too. Exit code 1 when any
artifact is bad; ``--repair`` moves bad ones to ``<root>/.quarantine/`` and drops them from the catalog, so the
next run rebuilds them.

The command also re-hashes the MLflow copies of every registered model version against the digests recorded
when it was logged (:func:`pipelines.tracking.registry_digests.verify_registry`): a BAD version names the file and
both digests and exits 1 as a bad artifact does; a version registered before digests is UNVERIFIED (reported,
not failed). ``--repair`` does not touch the registry.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipelines.ops.content import LookingStore, content_checks
from storage_kernels.integrity import (
    MODES,
    ArtifactCheck,
    FileCheck,
    check_file,
    check_manifest,
    quarantine,
    verify_manifest_dir,
)
from storage_kernels.storefs import published_dirs, unpublished_dirs

__all__ = ["VerifyResult", "verify_root"]

_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


@dataclass
class VerifyResult:
    """Every artifact's check, and where ``--repair`` moved the bad ones."""

    checks: list[ArtifactCheck]
    quarantined: dict[str, str]
    seconds: float

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    @property
    def bytes_read(self) -> int:
        return sum(c.bytes_read for c in self.checks)


def verify_root(root: Path, dataset: str | None = None, mode: str = "full", threads: int = 0,
                repair: bool = False, progress: Progress | None = None) -> VerifyResult:
    """Check every artifact under ``root`` in ``mode``; with ``repair``, quarantine the bad ones."""
    if mode not in MODES or mode == "off":
        raise ValueError(f"'--mode' expected full or sampled (got {mode!r})")
    start = time.perf_counter()
    # parse manifests only; a version directory without one (deleted by hand) is bad as it stands
    dirs = sorted([*published_dirs(root, dataset), *unpublished_dirs(root, dataset)])
    checks = [verify_manifest_dir(d, "off") for d in dirs]
    for c in checks:
        c.mode = mode
    jobs = [(c, name) for c in checks if c.artifact is not None for name in sorted(c.artifact.files)]
    total = sum(c.artifact.files[n].bytes for c, n in jobs if c.artifact is not None)
    task = progress.add_task("verify", total=total) if progress is not None else None
    workers = threads or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(check_file, c.artifact, name, mode): (c, name) for c, name in jobs}
        results: dict[tuple[int, str], FileCheck] = {}
        for fut in as_completed(futures):
            c, name = futures[fut]
            try:
                results[(id(c), name)] = fut.result()
            except OSError as e:  # unreadable (permissions, I/O error): bad, with the reason
                results[(id(c), name)] = FileCheck(name, "bad", "readable file", "readable",
                                                   f"{type(e).__name__}: {e.strerror or e}")
            if progress is not None and task is not None and c.artifact is not None:
                progress.advance(task, c.artifact.files[name].bytes)
    for c in checks:
        if c.artifact is not None:
            c.files = [check_manifest(c.artifact), *(results[(id(c), n)] for n in sorted(c.artifact.files))]
    if mode == "full":  # the invariants a run checks, on what the checksums passed (pipelines.ops.content)
        looking, bad = LookingStore(root), {c.path for c in checks if c.status == "BAD"}
        for c in checks:
            art = c.artifact
            if art is None or c.path in bad or any(Path(root, art.dataset, str(s), str(v)) in bad
                                                    for s, v in art.upstream.items()):
                continue  # its checks would read bad bytes (its own or an upstream's): the checksum said so
            c.files.extend(content_checks(art, looking))
    quarantined: dict[str, str] = {}
    if repair:
        from storage_kernels.catalog import Catalog

        catalog = Catalog(Path(root) / "catalog.duckdb")
        for c in checks:
            if c.status == "BAD":
                moved = quarantine(Path(root), c.path, c.problem(), catalog)
                quarantined[str(c.path)] = str(moved) if moved is not None else "(already moved)"
    return VerifyResult(checks, quarantined, time.perf_counter() - start)


def _row(c: ArtifactCheck, root: Path) -> dict[str, Any]:
    rel = c.path.relative_to(root).parts
    notes = c.problem() or "; ".join(f"{f.name}: {f.detail}" for f in c.unverifiable[:2])
    return {"dataset": rel[0], "stage": rel[1], "version": rel[2], "status": c.status, "files": len(c.files),
            "bytes_read": c.bytes_read, "problem": notes, "path": str(c.path)}


def command(
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Only this dataset (directory name)."),
    root: str | None = typer.Option(None, "--root", help="Data root (default: $STRATA_HOME, else ./strata_data)."),
    repair: bool = typer.Option(False, "--repair", help="Quarantine bad artifacts (moved to <root>/.quarantine/ "
                                "and removed from the catalog); the next run rebuilds them. The registry's "
                                "copies are reported, never changed."),
    mode: str = typer.Option("full", "--mode", help="full: re-hash every file, then run each artifact's "
                             "content checks (NaN, ranges); sampled: size and sampled blocks only (cheaper, misses "
                             "changes outside the samples)."),
    threads: int = typer.Option(0, "--threads", help="Hashing threads (0: one per CPU, at most 8).", min=0),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
) -> None:
    """Re-checksum every artifact against its manifest, and every registered model's MLflow copy against the
    digests recorded when it was logged: tables of OK/BAD/UNVERIFIABLE; exit 1 if any is bad."""
    from pipelines.core.paths import existing_root
    from pipelines.tracking.registry_digests import verify_registry

    base = existing_root(root, dataset)
    if mode not in ("full", "sampled"):
        _err.print(f"error: '--mode' expected full or sampled (got {mode!r})", highlight=False)
        raise typer.Exit(2)
    show = not json_out and _err.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=_err, transient=True, disable=not show) as progress:
        result = verify_root(base, dataset, mode, threads, repair, progress)
    registry = verify_registry(base, dataset)  # every file in full, whatever --mode: they are small
    rows = [_row(c, base) for c in result.checks]
    counts = {"versions": len(registry),
              **{s.lower(): sum(c.status == s for c in registry) for s in ("OK", "BAD", "UNVERIFIED")}}
    summary = {"root": str(base), "mode": mode, "artifacts": len(rows), "ok": result.count("OK"),
               "bad": result.count("BAD"), "unverifiable": result.count("UNVERIFIABLE"),
               "bytes_read": result.bytes_read, "seconds": round(result.seconds, 3), "models": counts}
    if json_out:
        sys.stdout.write(json.dumps({**summary, "results": rows, "quarantined": result.quarantined,
                                     "registry": [c.to_dict() for c in registry]}) + "\n")
    else:
        table = Table(title=f"strata verify ({mode}) under {base}", title_justify="left")
        for column in ("dataset", "stage", "version", "status", "files", "problem"):
            table.add_column(column, overflow="fold")
        style = {"OK": "green", "BAD": "bold red", "UNVERIFIABLE": "yellow", "UNVERIFIED": "yellow"}
        for r in rows:
            table.add_row(r["dataset"], r["stage"], r["version"], f"[{style[r['status']]}]{r['status']}[/]",
                          str(r["files"]), r["problem"])
        _out.print(table)
        _out.print(f"{summary['ok']} OK, {summary['bad']} BAD, {summary['unverifiable']} UNVERIFIABLE; "
                   f"{result.bytes_read / 2**20:.1f} MiB read in {result.seconds:.2f} s", highlight=False)
        for src, dest in result.quarantined.items():
            _out.print(f"quarantined {src} -> {dest}", highlight=False)
        if registry:
            models = Table(title="registered models (MLflow copies)", title_justify="left")
            for column in ("model", "version", "status", "files", "problem"):
                models.add_column(column, overflow="fold")
            for c in registry:
                models.add_row(c.name, str(c.version), f"[{style[c.status]}]{c.status}[/]", str(c.files),
                               c.problem())
            _out.print(models)
            _out.print(f"{counts['ok']} OK, {counts['bad']} BAD, {counts['unverified']} UNVERIFIED", highlight=False)
    if result.count("BAD") or counts["bad"]:
        raise typer.Exit(1)  # with --repair too: corruption was found, even though it is now out of the way
