"""Which artifact versions a data root still needs, and removing the rest (``strata gc``).

Every configuration change publishes new versions and nothing removes the old ones: on a large graph each
superseded ``pack`` or ``reorder`` version is gigabytes. A version is **kept** when any of these holds:

- it is one of the ``keep_last`` most recently used versions of its (dataset, stage);
- it was used within the last ``keep_within`` seconds;
- a live process has one of its files open or mapped (``/proc/<pid>/fd``, ``maps`` and ``cwd``; the processes
  of other users are visible to root only);
- its manifest cannot be read (``strata verify`` says why: gc never removes what it cannot read);
- it is pinned: the caller names it (``strata gc`` pins the versions the MLflow registry's champions were
  trained as, so the model in production stays traceable and a warm start reads its weights from the store);
- a kept version depends on it (its manifest's ``upstream``, followed transitively).

Everything else is removable. A version's last use is the later of its manifest's ``created_at`` and its
directory's mtime, which a run sets whenever it reuses the version (:func:`storage_kernels.store.mark_used`).

:func:`collect` removes one dataset at a time under that dataset's run lock, taken without waiting: a dataset
with a run in progress is skipped whole. Under the lock it checks again that no process has the version open
and that no run used it since the plan; then it renames the version's directory into ``<root>/.tmp/`` (one
atomic step: a reader finds the whole version or none), drops it from the catalog and deletes the files. A
crash in between leaves a temp entry that :meth:`ArtifactStore.cleanup_tmp` removes once this process is gone.

``strata gc`` also removes quarantined copies under ``<root>/.quarantine/`` that nothing needs any more
(:func:`plan_quarantine`; the rules are in the comment above it).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .artifact import Artifact
from .integrity import QUARANTINE_NAME
from .locks import LockHeld, dataset_lock
from .storefs import CATALOG_NAME, MANIFEST_NAME, TMP_NAME, _rmtree, owned_tmp_name, published_dirs

__all__ = ["Collected", "Decision", "GcPlan", "QuarantineDecision", "Quarantined", "Version", "collect", "format_age",
           "gc_apply", "gc_plan", "open_versions", "parse_duration", "plan", "plan_quarantine", "remove_quarantined",
           "scan", "scan_quarantine", "stale_catalog_rows"]

Key = tuple[str, str, str]  # (dataset, stage, version)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([smhdw]?)\s*")


def parse_duration(text: str | float, what: str = "--keep-within") -> float:
    """Seconds in ``text``: a number with an optional unit s, m, h, d or w (``"90m"``, ``"7d"``, ``"0"``)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"'{what}' expected a duration >= 0 (got {text!r})")
        return float(text)
    m = _DURATION_RE.fullmatch(str(text))
    if m is None:
        raise ValueError(f"'{what}' expected a duration such as 30m, 12h or 7d (got {text!r})")
    return float(m[1]) * _UNITS[m[2] or "s"]


def format_age(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it >= 1 (``"45s"``, ``"3.2h"``, ``"12d"``)."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.0f}{unit}" if value >= 10 else f"{value:.1f}{unit}"
    return f"{seconds:.0f}s"


@dataclass(frozen=True)
class Version:
    """One published artifact version as found on disk."""

    dataset: str
    stage: str
    version: str
    path: Path
    last_used: float  #: epoch seconds: the later of ``created_at`` and the directory's mtime
    bytes: int
    upstream: tuple[tuple[str, str], ...] = ()  #: (stage, version) of every upstream artifact
    readable: bool = True

    @property
    def key(self) -> Key:
        return (self.dataset, self.stage, self.version)


@dataclass(frozen=True)
class Decision:
    """Keep or remove one version, and why."""

    version: Version
    keep: bool
    reason: str


@dataclass
class Collected:
    """What :func:`collect` removed, and what it left in place with the reason."""

    removed: list[Version] = field(default_factory=list)
    skipped: list[tuple[Version, str]] = field(default_factory=list)
    quarantine_removed: list[Quarantined] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(v.bytes for v in self.removed)


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (for a version whose manifest cannot say)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def scan(root: str | Path, dataset: str | None = None) -> list[Version]:
    """Every published version under ``root`` (optionally one dataset's), with its size and last use."""
    root = Path(root)
    found = []
    for path in published_dirs(root, dataset):
        ds, stage, version = path.relative_to(root).parts
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:  # removed meanwhile
            continue
        try:
            art = Artifact(path)
            created = datetime.fromisoformat(art.created_at).timestamp()
            upstream = tuple(sorted((str(s), str(v)) for s, v in art.upstream.items()))
            nbytes = sum(f.bytes for f in art.files.values())  # the manifest's sizes, as the catalog's
            readable = True
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            created, upstream, nbytes, readable = 0.0, (), _tree_bytes(path), False
        found.append(Version(ds, stage, version, path, max(created, mtime), nbytes, upstream, readable))
    return found


def _version_key(target: str, prefix: str) -> Key | None:
    if not target.startswith(prefix):
        return None
    parts = target[len(prefix):].split(os.sep)
    if len(parts) < 3 or any(p.startswith(".") for p in parts[:3]):
        return None
    return (parts[0], parts[1], parts[2])


def open_versions(root: str | Path) -> dict[Key, set[int]]:
    """The versions under ``root`` that a live process has a file of open or mapped, or works in: key -> pids."""
    prefix = str(Path(root).resolve()) + os.sep
    found: dict[Key, set[int]] = defaultdict(set)

    def note(target: str, pid: int) -> None:
        key = _version_key(target.removesuffix(" (deleted)"), prefix)
        if key is not None:
            found[key].add(pid)

    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        with contextlib.suppress(OSError):  # the process exited, or belongs to another user
            note(os.readlink(f"/proc/{pid}/cwd"), pid)
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    note(os.readlink(fd.path), pid)
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf8", errors="replace") as maps:
            for line in maps:
                start = line.find("/")  # the path column; the columns before it hold no '/'
                if start >= 0:
                    note(line[start:].rstrip("\n"), pid)
    return dict(found)


def _pids(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(pids))


def plan(versions: list[Version], keep_last: int = 1, keep_within: float | None = None,
         in_use: dict[Key, set[int]] | None = None, now: float | None = None,
         pinned: Mapping[str, str] | None = None) -> list[Decision]:
    """Keep or remove each of ``versions`` by the rules of this module; sorted by dataset, stage, last use.
    ``pinned`` maps version ids to keep to the reason (version ids are content hashes: unique in a root)."""
    if keep_last < 0:
        raise ValueError(f"'--keep-last' expected a count >= 0 (got {keep_last})")
    now = time.time() if now is None else now
    in_use, pinned = in_use or {}, pinned or {}
    reasons: dict[Key, str] = {}
    groups: dict[tuple[str, str], list[Version]] = defaultdict(list)
    for v in versions:
        groups[(v.dataset, v.stage)].append(v)
    for group in groups.values():
        group.sort(key=lambda v: (v.last_used, v.version), reverse=True)
        rank = 0
        for v in group:
            if not v.readable:
                reasons[v.key] = "manifest unreadable (`strata verify` says why)"
                continue
            if v.key in in_use:
                reasons[v.key] = f"open by pid {_pids(in_use[v.key])}"
            elif v.version in pinned:
                reasons[v.key] = pinned[v.version]
            elif rank < keep_last:
                reasons[v.key] = "most recently used" if rank == 0 else f"among the {keep_last} most recently used"
            elif keep_within is not None and now - v.last_used <= keep_within:
                reasons[v.key] = f"used {format_age(now - v.last_used)} ago (within {format_age(keep_within)})"
            rank += 1
    by_key = {v.key: v for v in versions}
    pending = list(reasons)
    while pending:  # everything a kept version was built from stays
        v = by_key[pending.pop()]
        for stage, version in v.upstream:
            up = (v.dataset, stage, version)
            if up in by_key and up not in reasons:
                reasons[up] = f"upstream of {v.stage}/{v.version}"
                pending.append(up)
    ordered = sorted(versions, key=lambda v: (v.dataset, v.stage, -v.last_used, v.version))
    return [Decision(v, v.key in reasons, reasons.get(v.key, f"unused for {format_age(now - v.last_used)}"))
            for v in ordered]


def stale_catalog_rows(root: str | Path, catalog: Any, dataset: str | None = None) -> list[Key]:
    """Catalog entries whose artifact directory under ``root`` is gone (removed by hand, or the catalog of
    another root): the catalog is an index of the manifests on disk, so these rows describe nothing."""
    root = Path(root)
    return [(a["dataset"], a["stage"], a["version"]) for a in catalog.list_artifacts(dataset)
            if not (root / a["dataset"] / a["stage"] / a["version"] / MANIFEST_NAME).is_file()]


def _forget(catalog: Any, v: Version) -> None:
    from .catalog import CatalogLockTimeout

    try:
        catalog.forget_artifact(*v.key)
    except (CatalogLockTimeout, OSError) as e:  # the files are gone; the index catches up on a rebuild
        warnings.warn(f"'{catalog.db_path}' expected to drop {'/'.join(v.key)} (got {e}); run `strata catalog "
                      "rebuild`", RuntimeWarning, stacklevel=3)


def _remove_version(root: Path, v: Version, catalog: Any) -> bool:
    """Rename ``v`` out of the tree, drop it from ``catalog``, delete it; False when it was already gone."""
    tmp = root / TMP_NAME
    tmp.mkdir(exist_ok=True)
    doomed = tmp / owned_tmp_name("gc")
    try:
        os.rename(v.path, doomed)
    except FileNotFoundError:
        return False
    if catalog is not None:
        _forget(catalog, v)
    _rmtree(doomed)
    with contextlib.suppress(OSError):  # the stage directory, once its last version is gone
        v.path.parent.rmdir()
    return True


def collect(root: str | Path, decisions: list[Decision], catalog: Any = None,
            on_removed: Callable[[Version], None] | None = None) -> Collected:
    """Remove every version ``decisions`` does not keep (see the module docstring for the safeguards)."""
    root = Path(root)
    doomed: dict[str, list[Version]] = defaultdict(list)
    for d in decisions:
        if not d.keep:
            doomed[d.version.dataset].append(d.version)
    result = Collected()
    for dataset, versions in doomed.items():
        try:
            with dataset_lock(root, dataset, wait=False):
                busy = open_versions(root)
                for v in versions:
                    try:
                        used = v.path.stat().st_mtime
                    except FileNotFoundError:
                        result.skipped.append((v, "already gone"))
                        continue
                    if v.key in busy:
                        result.skipped.append((v, f"open by pid {_pids(busy[v.key])}"))
                    elif used > v.last_used:
                        result.skipped.append((v, "used by a run since the plan"))
                    elif _remove_version(root, v, catalog):
                        result.removed.append(v)
                        if on_removed is not None:
                            on_removed(v)
                    else:
                        result.skipped.append((v, "already gone"))
        except LockHeld as e:
            result.skipped.extend((v, f"a run of dataset {dataset} is in progress ({e})") for v in versions)
    return result


@dataclass
class GcPlan:
    """What ``strata gc`` would do under ``root``: every version's decision and the stale catalog rows."""

    root: Path
    decisions: list[Decision]
    stale: list[Key]
    #: the quarantined copies under ``<root>/.quarantine/`` (:func:`plan_quarantine`)
    quarantine: list[QuarantineDecision] = field(default_factory=list)

    @property
    def removable(self) -> list[Version]:
        return [d.version for d in self.decisions if not d.keep]

    @property
    def reclaimable_bytes(self) -> int:
        return sum(v.bytes for v in self.removable)


def _catalog(root: Path) -> Any:
    """The root's catalog, or None when it has none (gc never creates one)."""
    from .catalog import Catalog

    path = root / CATALOG_NAME
    return Catalog(path) if path.is_file() else None


def gc_plan(root: str | Path, dataset: str | None = None, keep_last: int = 1, keep_within: float | None = None,
            now: float | None = None, pinned: Mapping[str, str] | None = None) -> GcPlan:
    """Scan ``root`` (one dataset's versions, or all), find the open ones, decide (:func:`plan`, keeping
    ``pinned``), and list the catalog rows of directories that are gone. Reads only."""
    root = Path(root)
    now = time.time() if now is None else now
    decisions = plan(scan(root, dataset), keep_last, keep_within or None, open_versions(root), now, pinned)
    catalog = _catalog(root)
    quarantine = plan_quarantine(scan_quarantine(root, dataset), decisions, keep_within or None, now)
    return GcPlan(root, decisions, stale_catalog_rows(root, catalog, dataset) if catalog is not None else [],
                  quarantine)


def gc_apply(gc: GcPlan, on_removed: Callable[[Version], None] | None = None) -> Collected:
    """Carry ``gc`` out: drop its stale catalog rows, remove its removable versions (:func:`collect`) and
    quarantined copies (:func:`remove_quarantined`)."""
    catalog = _catalog(gc.root)
    if catalog is not None:
        for key in gc.stale:  # index rows of directories that are gone: nothing to lock, nothing to delete
            catalog.forget_artifact(*key)
    result = collect(gc.root, gc.decisions, catalog, on_removed)
    result.quarantine_removed = remove_quarantined(gc.quarantine)
    return result


# ---------------------------------------------------------------------------------- quarantined copies
#
# A version that failed a check is moved to ``.quarantine/<dataset>/<stage>/<version>-<UTC time>-<id>/`` (with a
# ``QUARANTINE.json``) for inspection, and nothing removed it: a check that fails on every build leaves one more
# copy per run. ``strata gc`` removes a copy when
#
# - the versions it keeps of that (dataset, stage) were all used after the copy was quarantined (the stage was
#   rebuilt and is in use again: the copy is older than anything gc keeps there), or
# - a newer copy of the same version is quarantined (it tells the same story);
#
# unless it was quarantined within ``keep_within``. The latest copy of a version whose stage has nothing kept
# since stays: it may be all that is left of the failure. Entries of another shape (``.quarantine/.tmp/resume/``
# checkpoints, hand-made names) are left alone. Nothing reads a quarantined copy, so removal needs no lock.

_ENTRY = re.compile(r"^(?P<version>.+)-(?P<stamp>\d{8}T\d{6}Z)-(?P<id>[0-9a-f]{6})$")


@dataclass(frozen=True)
class Quarantined:
    """One quarantined copy of a version."""

    dataset: str
    stage: str
    version: str
    path: Path
    quarantined_at: float  #: epoch seconds, from the entry's name
    bytes: int


@dataclass(frozen=True)
class QuarantineDecision:
    """Keep or remove one quarantined copy, and why."""

    entry: Quarantined
    keep: bool
    reason: str


def _dirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    except (FileNotFoundError, NotADirectoryError):
        return []


def scan_quarantine(root: str | Path, dataset: str | None = None) -> list[Quarantined]:
    """Every quarantined copy of a version under ``root`` (optionally one dataset's)."""
    found = []
    for ds in _dirs(Path(root) / QUARANTINE_NAME):
        if ds.name.startswith(".") or (dataset is not None and ds.name != dataset):
            continue  # .tmp: quarantined resume checkpoints
        for stage in _dirs(ds):
            for entry in _dirs(stage):
                m = _ENTRY.match(entry.name)
                if m is None:
                    continue
                at = datetime.strptime(m["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
                found.append(Quarantined(ds.name, stage.name, m["version"], entry, at, _tree_bytes(entry)))
    return found


def plan_quarantine(entries: Iterable[Quarantined], decisions: Iterable[Decision], keep_within: float | None,
                    now: float) -> list[QuarantineDecision]:
    """Keep or remove each copy by the rules of this module, given gc's ``decisions`` on the published versions."""
    kept_since: dict[tuple[str, str], float] = {}
    for d in decisions:
        if d.keep:
            key = (d.version.dataset, d.version.stage)
            kept_since[key] = min(kept_since.get(key, d.version.last_used), d.version.last_used)
    entries = sorted(entries, key=lambda e: (e.dataset, e.stage, e.version, -e.quarantined_at, e.path.name))
    seen: dict[tuple[str, str, str], int] = defaultdict(int)
    out = []
    for e in entries:
        copy = seen[(e.dataset, e.stage, e.version)]
        seen[(e.dataset, e.stage, e.version)] += 1
        age = now - e.quarantined_at
        since = kept_since.get((e.dataset, e.stage))
        if keep_within is not None and age <= keep_within:
            out.append(QuarantineDecision(e, True, f"quarantined {format_age(age)} ago (within "
                                                   f"{format_age(keep_within)})"))
        elif since is not None and e.quarantined_at < since:
            out.append(QuarantineDecision(e, False, "older than every version kept of its stage"))
        elif copy:
            out.append(QuarantineDecision(e, False, "a newer copy of the same version is quarantined"))
        else:
            out.append(QuarantineDecision(e, True, "the latest copy, and nothing of its stage kept since"))
    return out


def remove_quarantined(decisions: Iterable[QuarantineDecision]) -> list[Quarantined]:
    """Remove every copy ``decisions`` does not keep; returns those removed (not those already gone)."""
    removed = []
    for d in decisions:
        if not d.keep and d.entry.path.is_dir():
            _rmtree(d.entry.path)
            removed.append(d.entry)
    return removed
