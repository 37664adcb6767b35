"""``strata bench``: every policy on one graph, the same samples and model, under one memory budget.

Each policy (an entry of :data:`pipelines.methods.policies.POLICIES`) is materialised up to ``pack`` (the shared
stages once) and trained in a fresh worker process (:mod:`pipelines.bench.worker`), ``repeats`` times,
alternating (A B C A B C ...) so that drift of a shared machine hits every policy alike; times are the
median over repeats.

**Memory budget.** ``memory_budget`` (bytes; ``--memory-budget``, else the configuration's ``memory_budget``)
is what a policy may hold of the graph's data beyond its working set: its caches and the OS page cache. It
sizes the settings left at their defaults as for any run (:mod:`pipelines.budget`): half for the policies' CPU
caches, the rest for the page cache (features, topology, address tables) and ``diskgnn``'s segment window
over its disk caches; the page cache then has what calibration saw plus the slack.
Where a memory cgroup can be made (:func:`pipelines.core.confine.cgroup_support`: root, cgroup v1 or v2) each
worker runs in a fresh cgroup limited to ``memory_budget`` plus the policy's working set, page cache
included, after the files it reads have been evicted from the page cache. The working set (interpreter,
libraries, the batches in flight, the policy's read buffers) is the peak charge of a short unconfined run of
the same policy with its caches set to nothing, plus 8 MiB for run-to-run variation, unless
``memory_overhead`` gives it; ``mmap`` gets ``naive``'s (its own run would count its page cache), which
leaves it ``naive``'s read buffer as extra page cache: its figures are optimistic. Under a budget,
evaluation batches are as large as training ones (``sample.eval_batch_size``, unless set), so no phase needs
more working memory than calibration saw. The ``in_memory`` reference (a policy with ``out_of_core =
False``) runs unconfined. Where no cgroup can be made the report says why, and only the policies that read
with ``O_DIRECT`` are out of core.

**What is reported per policy** (``policies.NAME``): ``epoch_s`` (median over repeats of the steady epochs),
``bytes_read`` and ``read_requests`` per epoch (the feature source's own counts; the memory-mapped baseline's
reads are page faults, so its ``bytes_read`` is the process's storage reads, ``/proc/self/io``),
``os_read_bytes`` (everything the process read from storage per epoch, topology included),
``bytes_needed`` (bytes of the rows the batches need), ``read_fraction`` (``bytes_read / bytes_needed``),
``read_amplification`` (bytes read per byte of the rows that came from disk, i.e. not from a cache),
``test_acc`` / ``val_acc``, ``peak_rss_mb``, ``peak_cgroup_mb`` (page cache included), ``disk_bytes`` (its
``plan`` + ``pack`` artifacts) and ``disk_blowup`` (over the feature file), ``preprocess_s`` (its ``plan`` and
``pack`` build times), ``hit_rate_predicted`` (the plan's) and ``hit_rate_measured`` (rows served by the
caches while training), ``hit_rates_by_tier`` (the same two per cache tier, ``gpu`` and ``cpu``),
``speedup_vs_naive``. Beside the JSON, a PNG plots epoch time and bytes read.
``timers`` sums the loader's stage timers (busy, wait and CPU seconds per stage, ``train_s``) over every
epoch of a run, the first included; ``steady_timers`` over the epochs ``epoch_s`` is taken from (the first
left out), with ``overlap`` and ``gpu_step_share`` recomputed from those sums: compare ``steady_timers`` with
``epoch_s`` (medians over repeats, each timer on its own). ``calibration.NAME`` keeps what each policy's
cache-less probe measured (peak charge and highest sampled anonymous memory, MiB).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.bench.worker import steady_epochs, storage_read_bytes
from pipelines.config import PipelineConfig
from pipelines.core.confine import CgroupSupport, MemoryCgroup, cgroup_support, evict_page_cache
from pipelines.core.paths import StrataPaths
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES
from pipelines.runner import StageRunner
from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import TMP_NAME, owned_tmp_name

__all__ = ["BenchError", "Workers", "measure_sequential_read", "resolve_policies", "run_bench", "write_plot",
           "write_report"]

_SEQ_READ_BLOCK = 8 << 20
_SEQ_READ_MAX = 1 << 30
_POLICY_STAGES = ("plan", "pack")
_CALIBRATION_BATCHES = 8
_POLL_S = 0.01  # how often a running worker's anonymous memory is sampled
_JITTER = 8 << 20  # allowance for run-to-run variation of a working set (allocator, threads, timing), at least
#: ... and at least this share of the calibrated working set: wide features (20k x 4,096) calibrated at 2,082 and
#: 2,182 MB in two sessions and peaked at 2,272 MB in full runs (issue 29), killing runs at a limit of 8 MB over
_JITTER_SHARE = 0.05
# a preprocessing worker beyond the budget: interpreter and libraries (~0.5 GiB) and a stage's bookkeeping
# (sample-set indexes, address tables, the disk-cache search): 512 MiB had demo's pack killed at a 25 MiB budget
_PREPARE_OVERHEAD = 1 << 30
_MB = 1 << 20


class BenchError(RuntimeError):
    """A worker failed (its stderr tail is in the message)."""


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    """Write a JSON report atomically (temp file, then rename), creating the folder."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)


def measure_sequential_read(path: Path, max_bytes: int = _SEQ_READ_MAX) -> dict[str, Any]:
    """Sequential aligned direct reads of ``path`` in 8 MiB requests; MB/s and whether O_DIRECT held."""
    size = min(path.stat().st_size, max_bytes) // DATA_ALIGN * DATA_ALIGN
    if size == 0:
        return {"seq_read_mb_s": 0.0, "bytes": 0, "direct_io": False}
    fd, direct = kernels.open_direct(path)
    try:
        block = min(_SEQ_READ_BLOCK, size)
        buf = kernels.aligned_empty(block)
        start = time.perf_counter()
        done = 0
        while done < size:
            n = min(block, size - done)
            n = n // DATA_ALIGN * DATA_ALIGN if direct else n
            if n == 0:
                break
            kernels.pread_ranges(fd, [done], [n], buf, [0], direct, num_threads=1)
            done += n
        elapsed = time.perf_counter() - start
    finally:
        kernels.close_fd(fd)
    return {"seq_read_mb_s": done / 1e6 / elapsed if elapsed > 0 else 0.0, "bytes": done, "direct_io": direct}


def resolve_policies(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"all"`` / None -> every registered policy (``auto`` first, baselines last); ``"a,b"`` or a list ->
    checked names, where ``all`` stands for every policy (``all,auto`` is ``all``: auto is one of them)."""
    from pipelines.methods.policies import POLICIES

    known = list(POLICIES)
    baselines = [n for n in ("in_memory", "mmap", "naive") if n in known]
    every = [n for n in known if n not in baselines] + baselines
    if names is None or names == "all":
        return tuple(every)
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    items = [m for n in items for m in (every if n == "all" else [n])]
    unknown = [n for n in items if n not in known]
    if unknown or not items:
        raise ValueError(f"'--policies' expected 'all' or a comma-separated list of {', '.join(known)} (got {names!r})")
    return tuple(dict.fromkeys(items))


def _bytes_needed(samples: SampleSet, row_bytes: int) -> int:
    """Feature bytes one training epoch's batches need (every input row of every batch)."""
    return sum(int(np.diff(samples.node_range(b))[0]) * row_bytes for b in samples.batch_ids("train", 0))


def _steady(values: Sequence[float], last_has_eval: bool) -> float:
    """The median of a run's steady epochs: without the first (cold) and, when it evaluated, the last."""
    vals = list(values)
    if last_has_eval and len(vals) > 2:
        vals = vals[:-1]
    vals = steady_epochs(vals)
    return float(statistics.median(vals)) if vals else 0.0


@contextlib.contextmanager
def _owned_tmp(root: Path) -> Iterator[Path]:
    """A directory of this process in the data root's temp dir for one worker's job and result files: removed
    on exit and, if this process is killed first, by the next ``ArtifactStore.cleanup_tmp`` (a directory of the
    system's temp dir would stay for good)."""
    path = root / TMP_NAME / owned_tmp_name("bench")
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Workers:
    """Runs bench workers (:mod:`pipelines.bench.worker`), each in a fresh process, confined when a budget is set
    and a cgroup can be made; ``poll()``, when given, is called every few milliseconds while one runs."""

    def __init__(self, root: Path, support: CgroupSupport | None, evict: list[Path],
                 timeout_s: float | None = None, poll: Any = None) -> None:
        self.root, self.support, self.evict = root, support, evict
        self.timeout_s = timeout_s  # per training run (None: none)
        self.poll = poll

    def run(self, policy: str, phase: str, cfg: PipelineConfig, limit: int | None = None,
            **extra: Any) -> dict[str, Any]:
        confined = POLICIES.get(policy).out_of_core  # the in-memory reference runs unconfined
        config = cfg.model_dump(mode="json")
        if not confined:  # ... and holds the whole feature file: no budget to check it against
            config["memory_budget"] = None
        job = {"root": str(self.root), "config": config, "policy": policy, "phase": phase, **extra}
        with _owned_tmp(self.root) as tmp:
            job_path, out_path, stage_path = tmp / "job.json", tmp / "out.json", tmp / "stage"
            job["stage_file"] = str(stage_path)
            job_path.write_text(json.dumps(job))
            evict_page_cache(self.evict)  # every run starts with the data on disk, not in the page cache
            cgroup = MemoryCgroup(limit, self.support) if confined and limit is not None and self.support else None
            timeout = self.timeout_s if phase == "train" else None
            anon = [0]  # the highest anonymous charge seen while it ran (sampled)

            def sample_anon() -> None:
                if cgroup is not None:
                    anon[0] = max(anon[0], cgroup.anon_bytes())
                if self.poll is not None:
                    self.poll()

            try:
                proc, read_at_kill = _run_worker(
                    [sys.executable, "-m", "pipelines.bench.worker", str(job_path), str(out_path)],
                    cgroup.join_argv() if cgroup else None, timeout, sample_anon)
                peak = cgroup.peak_bytes() if cgroup else None
                oom = cgroup.oom_kills() if cgroup else 0
            finally:
                if cgroup is not None:
                    cgroup.close()
            if read_at_kill is not None:
                return {"error": f"timed out after {timeout:.0f} s (--timeout)", "timed_out": True,
                        "os_read_bytes_until_timeout": read_at_kill, "peak_cgroup_mb": peak / _MB if peak else None}
            if proc.returncode != 0 or not out_path.exists():
                tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
                if oom:
                    return {"error": f"OOM-killed at the cgroup limit of {limit / _MB:.0f} MB", "oom_killed": True,
                            "peak_cgroup_mb": peak / _MB if peak else None,
                            "stage": stage_path.read_text() if stage_path.exists() else None}
                raise BenchError(f"bench worker ({policy}, {phase}) exited with {proc.returncode}:\n{tail}")
            out = json.loads(out_path.read_text())
        out["peak_cgroup_mb"] = peak / _MB if peak is not None else None
        out["peak_anon_mb"] = anon[0] / _MB if cgroup is not None else None
        out["oom_killed"] = False
        out["confined"] = cgroup is not None
        return out


def _run_worker(argv: list[str], preexec: Any, timeout_s: float | None, poll: Any = None
                ) -> tuple[subprocess.CompletedProcess[str], int | None]:
    """Run a worker, calling ``poll()`` every few milliseconds while it runs; past ``timeout_s`` kill it and
    return the bytes it had read from storage (else None)."""
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(argv, preexec_fn=preexec, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        read_at_kill = None
        deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        while proc.poll() is None:
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                read_at_kill = storage_read_bytes(proc.pid)
                proc.kill()
                break
            time.sleep(_POLL_S)
        proc.wait()
        stderr.seek(0)
        return subprocess.CompletedProcess(argv, proc.returncode, "", stderr.read()), read_at_kill


def _confinement(memory_budget: int | None) -> tuple[CgroupSupport | None, str]:
    if memory_budget is None:
        return None, "none (no --memory-budget: unconfined, the page cache may hold the whole graph)"
    support = cgroup_support()
    if support.available:
        return support, support.label
    return None, (f"none ({support.reason}); only the policies that read with O_DIRECT bypass the page cache, "
                  "mmap and in_memory are unconfined")


def _artifact_bytes(*artifacts: Any) -> int:
    return sum(int(f.get("bytes", 0)) for a in artifacts for f in a.manifest.get("files", []))


def run_bench(cfg: PipelineConfig, paths: StrataPaths, out_path: str | Path | None = None,
              progress: Progress | None = None, policies: str | Sequence[str] | None = "all",
              memory_budget: int | None = None, memory_overhead: int | None = None,
              repeats: int = 1, timeout_s: float | None = None, eval_batches: int | None = None) -> dict[str, Any]:
    """Materialise and train every policy of ``policies`` (see the module docstring); returns (and writes, with
    its plot) the report. ``eval_batches`` evaluates on the first that many validation and test batches only
    (for timing runs on large graphs: the accuracies are then those of a subset)."""
    names = resolve_policies(policies)
    memory_budget = memory_budget if memory_budget is not None else cfg.memory_budget
    if memory_budget is not None:
        cfg = PipelineConfig.validated({**cfg.to_dict(), "memory_budget": memory_budget})  # pipelines.budget
    if repeats < 1:
        raise ValueError(f"'--repeats' expected at least 1 (got {repeats})")
    support, confinement = _confinement(memory_budget)
    if support is not None:
        MemoryCgroup.remove_stale(support)  # groups of a bench that was killed
    store = paths.store()
    if eval_batches is not None and eval_batches < 1:
        raise ValueError(f"'--eval-batches' expected at least 1 (got {eval_batches})")
    report: dict[str, Any] = {"dataset": cfg.dataset, "memory_budget": memory_budget, "confinement": confinement,
                              "repeats": repeats, "timeout_s": timeout_s, "eval_batches": eval_batches}
    subset = {"max_eval_batches": eval_batches} if eval_batches else {}
    workers = Workers(store.root, support, [], timeout_s)

    # 1. preprocessing, per policy (confined like training where a budget is set)
    prepared: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        pcfg = cfg.model_copy(update={"policy": name})
        if support is not None and memory_budget is not None:
            limit = _prepare_limit(memory_budget, memory_overhead)
            report["preprocess_cgroup_limit"] = limit
            prepared[name] = workers.run(name, "prepare", pcfg, limit=limit)
            if prepared[name].get("error"):  # never fall back to preprocessing unconfined
                raise BenchError(
                    f"preprocessing for {name} failed in stage '{prepared[name].get('stage', '?')}': "
                    f"{prepared[name]['error']} (the budget plus {limit - memory_budget >> 20} MiB for the "
                    "interpreter); give it more with --memory-budget or --memory-overhead, or lower that stage's "
                    "memory setting (reorder.memory_mb, partition.memory_mb, pack.memory_mb)")
        else:
            start = time.perf_counter()
            StageRunner(pcfg, store).run_until("pack")
            prepared[name] = {"wall_s": time.perf_counter() - start, "peak_cgroup_mb": None}
        if progress:
            progress("bench: preprocessing", i + 1, len(names))
    shared = StageRunner(cfg.model_copy(update={"policy": names[0]}), store)
    graph, ordering = shared.artifact("ingest"), shared.artifact("reorder")
    sample_set = SampleSet(shared.artifact("sample").path)
    features_path = Path(ordering.file("features.npy"))
    file_rows = np.load(features_path, mmap_mode="r")
    row_bytes = int(file_rows.shape[1]) * file_rows.dtype.itemsize  # float16 files: half the bytes
    feature_bytes = int(graph.stats.get("num_nodes", 0)) * row_bytes
    workers.evict = [ordering.path.parent.parent]  # the dataset's artifacts (every stage)
    needed = _bytes_needed(sample_set, row_bytes)
    report.update({
        "graph": {k: graph.stats.get(k) for k in ("num_nodes", "num_edges", "feature_dim", "feature_bytes")},
        "config": {"fanouts": list(cfg.sample.fanouts), "batch_size": cfg.sample.batch_size,
                   "eval_batch_size": int(shared.artifact("sample").stats.get("eval_batch_size",
                                                                           cfg.sample.eval_batch_size)),
                   "epochs": cfg.train.epochs, "cpu_cache_fraction": cfg.plan.cpu_cache_fraction,
                   "gpu_cache_fraction": cfg.plan.gpu_cache_fraction, "device": cfg.train.device,
                   # what the budget sized (the fractions count only where these are null)
                   "cpu_cache_bytes": cfg.plan.cpu_cache_bytes,
                   "disk_cache_buffer_bytes": cfg.plan.disk_cache_buffer_bytes,
                   "cpu_count": os.cpu_count()},
        "disk": measure_sequential_read(features_path),
        "shared_preprocess_s": sum(float(r.artifact.timings.get("total_s", 0.0))
                                   for r in shared.run_until("pack", checks=False)
                                   if r.artifact.stage not in _POLICY_STAGES),
    })

    # 2. each policy's working set without its caches, measured (the budget comes on top of it)
    overheads: dict[str, int] = {}
    probes: dict[str, dict[str, Any]] = {}  # what each calibration run measured
    if support is not None and memory_budget is not None:
        for i, name in enumerate(names):
            if memory_overhead is not None:
                overheads[name] = memory_overhead
            elif name == "auto":  # the working set of what it chose (after the policies it may share it with)
                continue
            elif POLICIES.get(name).out_of_core:
                probes[name] = {}
                overheads[name] = _calibrate(workers, cfg, name, _prepare_limit(memory_budget, None), probes[name])
            if progress:
                progress("bench: calibration", i + 1, len(names))
        if "auto" in names and memory_overhead is None:
            chosen = _auto_record(shared, cfg)["policy"]
            probe = chosen if POLICIES.get(chosen).out_of_core else "naive"  # its features count in the budget
            if probe not in overheads:
                probes[probe] = {}
                overheads[probe] = _calibrate(workers, cfg, probe, _prepare_limit(memory_budget, None), probes[probe])
            overheads["auto"] = overheads[probe]
        report["memory_overhead"] = overheads
        report["calibration"] = probes

    # 3. training, alternating policies across repeats
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    total = repeats * len(names)
    for r in range(repeats):
        for i, name in enumerate(names):
            limit = memory_budget + overheads[name] if name in overheads and memory_budget is not None else None
            runs[name].append(workers.run(name, "train", cfg.model_copy(update={"policy": name}), limit=limit,
                                          **subset))
            if progress:
                progress("bench: training", r * len(names) + i + 1, total)

    report["policies"] = {}
    for name in names:
        runner = shared.derive(cfg.model_copy(update={"policy": name}))
        plan, pack = runner.artifact("plan"), runner.artifact("pack")
        report["policies"][name] = _summarise(name, runs[name], prepared[name], plan, pack, needed, feature_bytes)
        if name in overheads and memory_budget is not None:
            report["policies"][name].update(memory_overhead=overheads[name],
                                            cgroup_limit=memory_budget + overheads[name])
    if "auto" in names:
        report["auto"] = auto_report(_auto_record(shared, cfg), report["policies"])
    base = report["policies"].get("naive", {}).get("epoch_s")
    for entry in report["policies"].values():
        epoch_s = entry.get("epoch_s")
        entry["speedup_vs_naive"] = base / epoch_s if base and epoch_s else None
    if out_path is not None:
        write_report(out_path, report)
        write_plot(Path(out_path).with_suffix(".png"), report)
    return report


def _auto_record(shared: StageRunner, cfg: PipelineConfig) -> dict[str, Any]:
    """``policy=auto``'s record in its plan artifact (its choice and every candidate's prediction)."""
    return shared.derive(cfg.model_copy(update={"policy": "auto"})).artifact("plan").stats["auto"]


def auto_report(record: dict[str, Any], measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What ``auto`` chose, its measured epoch against the best policy's that fits (auto's refusals left out),
    and every candidate's predicted epoch against the epoch measured for that policy in this bench
    (candidates with settings of their own are measured only when chosen: ``auto``'s own run)."""
    own = measured.get("auto", {}).get("epoch_s")
    refused = {c["policy"] for c in record["candidates"] if c["refused"] and not c["settings"]}
    # the best policy that fits the budget (one auto refused, e.g. in_memory past it, is only a reference)
    others = {n: e["epoch_s"] for n, e in measured.items() if n != "auto" and n not in refused and e.get("epoch_s")}
    best = min(others.items(), key=lambda kv: kv[1]) if others else None
    rows = []
    for c in record["candidates"]:
        own_settings = {k: v for k, v in record["settings"].items() if not k.startswith("train.")}
        is_choice = c["policy"] == record["policy"] and c["settings"] == own_settings
        actual = own if is_choice else (others.get(c["policy"]) if not c["settings"] else None)
        entry = measured.get("auto" if is_choice else c["policy"], {}) if is_choice or not c["settings"] else {}
        rows.append({"policy": c["policy"], "settings": c["settings"], "predicted_epoch_s": c["epoch_s"],
                     "measured_epoch_s": actual, "refused": c["refused"] or None, "chosen": is_choice,
                     "predicted_bytes": (c.get("reads") or {}).get("bytes"), "measured_bytes": entry.get("bytes_read"),
                     "predicted_requests": (c.get("reads") or {}).get("requests"),
                     "measured_requests": entry.get("read_requests"),
                     "predicted_over_measured": c["epoch_s"] / actual if actual and c["epoch_s"] else None})
    return {"chosen": record["policy"], "settings": record["settings"], "epoch_s": own,
            "best_policy": best[0] if best else None, "best_epoch_s": best[1] if best else None,
            "over_best": own / best[1] if own and best else None, "candidates": rows,
            "left_out": record.get("left_out", {})}


def _prepare_limit(memory_budget: int, memory_overhead: int | None) -> int:
    """The cgroup limit of a preprocessing worker: the budget plus the interpreter and libraries."""
    return memory_budget + (memory_overhead if memory_overhead is not None else _PREPARE_OVERHEAD)


def _calibrate(workers: Workers, cfg: PipelineConfig, name: str, prepare_limit: int,
               measured: dict[str, Any] | None = None) -> int:
    """``name``'s working set in bytes: the peak charge of a short unconfined run (a few training and
    evaluation batches) with its caches set to nothing. A memory map (``mmap``) has no cache to switch off
    (its page cache would be measured as working set): it gets the cache-less ``naive`` policy's, which
    includes ``naive``'s read buffer -- page cache ``mmap`` may use on top of the budget, so its figures are
    optimistic. (Sampling the anonymous memory instead misses the short peaks of a batch: every policy was
    then killed at its limit.) The probe's own artifacts are built in a worker confined to ``prepare_limit``,
    like every policy's preprocessing, never in the bench's process. ``measured`` receives the probe's peak
    charge and its highest sampled anonymous memory (MiB)."""
    probe = "naive" if POLICIES.get(name).page_cache else name
    ccfg = cfg.model_copy(update={
        "policy": probe, "train": dataclasses.replace(cfg.train, epochs=1),
        "plan": cfg.plan.model_copy(update={"cpu_cache_bytes": 0, "gpu_cache_bytes": 0,
                                            "disk_cache_buffer_bytes": 0})})
    prep = workers.run(probe, "prepare", ccfg, limit=prepare_limit)
    if prep.get("error"):
        raise BenchError(f"calibration of {name} failed preprocessing its cache-less probe in stage "
                         f"'{prep.get('stage', '?')}': {prep['error']}")
    calib = workers.run(probe, "train", ccfg, limit=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                        max_train_batches=_CALIBRATION_BATCHES, max_eval_batches=_CALIBRATION_BATCHES)
    if calib.get("error"):
        raise BenchError(f"calibration of {name} failed: {calib['error']}")
    if measured is not None:
        measured.update(probe=probe, peak_cgroup_mb=calib.get("peak_cgroup_mb"), peak_anon_mb=calib.get("peak_anon_mb"))
    peak = -(-int(calib["peak_cgroup_mb"] * _MB) // _MB) * _MB  # whole MiB
    return peak + max(_JITTER, -(-int(peak * _JITTER_SHARE) // _MB) * _MB)  # plus run-to-run jitter


def _summarise(name: str, runs: list[dict[str, Any]], prepared: dict[str, Any], plan: Any, pack: Any,
               needed: int, feature_bytes: int) -> dict[str, Any]:
    """One policy's entry from its repeated runs (medians) and its artifacts."""
    done = [r for r in runs if not r.get("error")]
    entry: dict[str, Any] = {
        "disk_bytes": _artifact_bytes(plan, pack),
        "disk_blowup": _artifact_bytes(plan, pack) / feature_bytes if feature_bytes else None,
        "preprocess_s": sum(float(a.timings.get("total_s", 0.0)) for a in (plan, pack)),
        "preprocess_peak_mb": prepared.get("peak_cgroup_mb") or prepared.get("peak_rss_mb"),
        # the page cache fills any cgroup up to its limit; the anonymous memory is the process's own
        "preprocess_peak_anon_mb": prepared.get("peak_anon_mb"),
        "hit_rate_predicted": plan.stats.get("predicted_hit_rate"),
        "bytes_needed": needed,
        "runs": len(runs),
    }
    if not done:
        first = runs[0] if runs else {}
        entry.update({"error": first.get("error", "no run"), "oom_killed": bool(first.get("oom_killed")),
                      "timed_out": bool(first.get("timed_out"))})
        if first.get("timed_out"):
            entry["os_read_bytes_until_timeout"] = first.get("os_read_bytes_until_timeout")
        return entry
    epoch_runs = [_steady(r["epoch_s"], last_has_eval=False) for r in done]
    os_bytes = [_steady(r["os_read_bytes"], last_has_eval=True) for r in done]
    faults = [_steady(r["major_faults"], last_has_eval=True) for r in done]
    source_bytes = statistics.median(r["bytes_read"] / max(r["epochs"], 1) for r in done)
    paged = "memory-mapped" in done[0]["fallback_reason"]  # reads are page faults the source cannot count
    bytes_read = statistics.median(os_bytes) if paged else source_bytes
    entry.update({
        "epoch_s": float(statistics.median(epoch_runs)),
        "epoch_s_runs": [round(x, 4) for x in epoch_runs],
        "bytes_read": int(bytes_read),
        "bytes_read_counted_by": "os (page faults of the memory map, topology included)" if paged else "source",
        "read_requests": int(statistics.median(faults)) if paged else
        int(statistics.median(r["read_requests"] / max(r["epochs"], 1) for r in done)),
        "os_read_bytes": int(statistics.median(os_bytes)),
        "read_fraction": bytes_read / needed if needed else None,
        "read_amplification": _amplification(bytes_read, needed, None if paged else done[0]["hit_rate_measured"]),
        "test_acc": done[0]["test_acc"],
        "val_acc": done[0]["val_acc"],
        "eval_batches_run": done[0].get("eval_batches_run"),
        "eval_s": statistics.median(r.get("eval_s", 0.0) for r in done),  # validation + test, seconds
        "hit_rate_measured": None if paged else done[0]["hit_rate_measured"],
        "hit_rates_by_tier": None if paged else _tier_hit_rates(plan.stats, done[0].get("train_rows_by_tier") or {}),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in done),
        "peak_cgroup_mb": max((r["peak_cgroup_mb"] or 0.0) for r in done) or None,
        "peak_anon_mb": max((r.get("peak_anon_mb") or 0.0) for r in done) or None,
        "direct_io": done[0]["direct_io"],
        "confined": done[0]["confined"],
        "oom_killed": any(r.get("oom_killed") for r in runs),
        "timed_out": any(r.get("timed_out") for r in runs),
        "timers": _median_timers(done, "timers"),
        "steady_timers": _median_timers(done, "steady_timers"),
        # the torch threads it trained at: its plan's probe chose them (or auto's, or the user's)
        "compute_threads": int(done[0]["timers"].get("compute_threads", 0)) or None,
    })
    if len({(r["test_acc"], r["val_acc"]) for r in done}) > 1:
        entry["accuracy_varies_across_repeats"] = [(r["val_acc"], r["test_acc"]) for r in done]
    return entry


def _tier_hit_rates(plan_stats: dict[str, Any], rows_by_tier: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Per cache tier (``gpu``, ``cpu``): the plan's predicted share of the training rows it serves and the
    share it served (``rows_by_tier`` of a run; the rows of every tier, disk ones included, are the whole)."""
    total = sum(rows_by_tier.values())
    return {tier: {"predicted": plan_stats.get(f"predicted_hit_rate_{tier}"),
                   "measured": rows_by_tier.get(tier, 0) / total if total else None}
            for tier in ("gpu", "cpu")}


def _median_timers(runs: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    """Each timer of ``run[key]`` as its median over ``runs`` (a timer a run lacks counts as 0)."""
    names = dict.fromkeys(name for r in runs for name in r.get(key, {}))
    return {k: round(statistics.median(r.get(key, {}).get(k, 0.0) for r in runs), 4) for k in names}


def _amplification(bytes_read: float, needed: int, hit_rate: float | None) -> float | None:
    """Bytes read per byte of the rows that came from disk (the rows the caches did not serve); with no hit
    rate (a memory map), per byte of every needed row. None when nothing came from disk."""
    from_disk = needed * (1.0 - hit_rate) if hit_rate is not None else needed
    return bytes_read / from_disk if from_disk > 0 and bytes_read > 0 else None


def write_plot(path: str | Path, report: dict[str, Any]) -> None:
    """A PNG with two bar charts: epoch time and bytes read per epoch, one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.get("policies", {})
    names = list(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, scale, color, label in ((axes[0], "epoch_s", 1.0, "tab:blue", "epoch time (s, median)"),
                                         (axes[1], "bytes_read", 1 / _MB, "tab:orange", "bytes read per epoch (MiB)")):
        ax.bar(names, [(rows[n].get(key) or 0) * scale for n in names], color=color)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
        for i, n in enumerate(names):  # a run that did not finish has no bar: say why
            if rows[n].get("epoch_s") is None:
                why = "timed out" if rows[n].get("timed_out") else "OOM" if rows[n].get("oom_killed") else "failed"
                ax.text(i, 0, why, ha="center", va="bottom", rotation=90, fontsize=8, color="tab:red")
    budget = report.get("memory_budget")
    fig.suptitle(f"strata bench: {report.get('dataset')} -- budget "
                 f"{f'{budget / _MB:.0f} MiB' if budget else 'none'}, confinement {report.get('confinement')}",
                 fontsize=9)
    fig.tight_layout()
    out = Path(path)
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)
