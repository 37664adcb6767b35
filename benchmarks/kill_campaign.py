"""Kill campaign: SIGKILL a real ``strata run`` at a random moment of a chosen stage, rerun it, check recovery.

Each trial (seeded) picks a dataset (``tiny``, or a 20,000-node edge list written once into the work dir), a
target stage (ingest .. export, or ``finish``: after the last stage's line, while the run records and exits) and
a root: ``fresh`` (empty) or ``warm`` (the worker's root, already holding a full run; the trial's settings
invalidate the target stage and everything downstream, so the stages before it are reused and the target is
built). The victim is killed (``SIGKILL`` to its process group) at a uniform random offset within the target
stage's window, measured by a calibration run per dataset: the window starts when the previous stage's
``[strata] <stage>: built|reused`` line appears (for ingest: when the run takes its dataset lock). The stage the
kill actually landed in is read back from the lines the victim printed before it died.

After the kill: no half-written artifact is visible (every ``<dataset>/<stage>/<version>`` directory has a
manifest, and :func:`pipelines.ops.verify.verify_root` finds every artifact OK). Then the same command reruns, and:
it succeeds; it reuses exactly the artifacts that were published before the kill and builds the others; every
artifact verifies; the catalog lists exactly the artifacts on disk, without duplicate metric rows; ``.tmp``
holds no temp dir (and no resume checkpoint) afterwards; no MLflow run is left RUNNING and the victim's runs are
FAILED; every train artifact is registered once; no Dagster run is left STARTED.

    python benchmarks/kill_campaign.py --trials 100 --minutes 40 --out benchmarks/results/kill_campaign.json

Trials stop when ``--trials`` are done or ``--minutes`` have passed (a running trial is finished). The JSON holds
every trial and per-stage counts; the exit code is 1 when any trial failed a check.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("ingest", "reorder", "partition", "sample", "plan", "pack", "train", "export")
TARGETS = (*STAGES, "finish")
LINE = re.compile(r"^\[strata\] (\w+): (built|reused) (\w+)")
# short training, checkpointed often (a kill in training resumes); CPU, one thread: deterministic
FAST = ["--set", "train.epochs=2", "--set", "sample.epochs=1", "--set", "train.device=cpu",
        "--set", "train.num_threads=1", "--set", "sample.batch_size=256", "--set", "train.checkpoint_every=2"]
# per target stage: a setting that changes that stage's artifact version (and so everything downstream), with
# the trial number mixed in, so a warm root reuses the stages before the target and builds the target
WARM_OVERRIDES = {
    "reorder": lambda k: ["reorder.strategy=random", f"reorder.seed={k}"],
    "partition": lambda k: [f"partition.seed={k}"],
    "sample": lambda k: [f"sample.seed={k}"],
    "plan": lambda k: [f"plan.cpu_cache_fraction={0.05 + (k % 97) / 1000:.3f}"],
    "pack": lambda k: [f"pack.disk_budget={3.0 + (k % 97) / 100:.2f}"],
    "train": lambda k: [f"train.seed={k}"],
    "export": lambda k: [f"export.web_seeds={16 + k % 97}"],
    "finish": lambda k: [f"export.web_seeds={16 + k % 97}"],
}


# ------------------------------------------------------------------------------------------------ datasets
def write_edgelist(dirpath: Path, n: int = 20_000, degree: int = 10, dim: int = 32, classes: int = 5,
                   seed: int = 0) -> list[str]:
    """A random graph with class-centroid features as an edge list source; returns the ``strata run`` args."""
    rng = np.random.default_rng(seed)
    dirpath.mkdir(parents=True, exist_ok=True)
    labels = rng.integers(0, classes, n).astype(np.int64)
    # mostly within-class edges, so the model has something to learn
    m = n * degree // 2
    src = rng.integers(0, n, m)
    same = rng.random(m) < 0.7
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]
    dst = rng.integers(0, n, m)
    for c in range(classes):
        pick = same & (labels[src] == c)
        dst[pick] = rng.choice(by_class[c], int(pick.sum()))
    keep = src != dst
    edges = dirpath / "killedges.csv"
    np.savetxt(edges, np.stack([src[keep], dst[keep]], 1), fmt="%d", delimiter=",", header="src,dst", comments="")
    centroids = rng.normal(size=(classes, dim)).astype(np.float32)
    np.save(dirpath / "features.npy", (centroids[labels] + rng.normal(size=(n, dim))).astype(np.float32))
    np.save(dirpath / "labels.npy", labels)
    return ["--dataset", f"edgelist:{edges}", "--set", f"ingest.options.features={dirpath / 'features.npy'}",
            "--set", f"ingest.options.labels={dirpath / 'labels.npy'}"]


# ------------------------------------------------------------------------------------------------ one run
@dataclass
class RunOutput:
    """A finished or killed ``strata run``: exit code, stderr lines with arrival times, the JSON summary."""

    returncode: int
    lines: list[tuple[float, str]]
    summary: dict[str, Any] | None
    started: float
    pid: int = 0
    run_start: float | None = None  # when it took the dataset lock (seconds after start)
    killed_at: float | None = None
    ended: float = 0.0  # when it exited (seconds after start)

    def stage_lines(self) -> dict[str, tuple[float, str, str]]:
        """``stage -> (time, built|reused, version)`` of the stage lines printed."""
        out = {}
        for t, line in self.lines:
            m = LINE.match(line)
            if m:
                out[m[1]] = (t, m[2], m[3])
        return out

    def stderr(self, last: int = 40) -> str:
        return "\n".join(line for _, line in self.lines[-last:])


def _strata(root: Path, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_HOME", None)
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", "--root", str(root), "--json", *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _lock_taken(root: Path, dataset: str, pid: int) -> bool:
    from storage_kernels.locks import holder_pid

    return holder_pid(root / ".locks" / f"dataset-{dataset}.lock") == pid


def run_strata(root: Path, args: list[str], dataset: str | None = None,
               kill: Any = None, timeout: float = 900) -> RunOutput:
    """Run ``strata run`` to the end, or until ``kill(out, now)`` returns True (then SIGKILL its group)."""
    proc = _strata(root, args)
    out = RunOutput(0, [], None, time.monotonic(), pid=proc.pid)
    stdout: list[str] = []

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            out.lines.append((time.monotonic() - out.started, line.rstrip("\n")))

    def read_out() -> None:
        assert proc.stdout is not None
        stdout.append(proc.stdout.read())

    readers = [threading.Thread(target=read_err, daemon=True), threading.Thread(target=read_out, daemon=True)]
    for r in readers:
        r.start()
    deadline = out.started + timeout
    while proc.poll() is None:
        now = time.monotonic() - out.started
        if out.run_start is None and dataset is not None and _lock_taken(root, dataset, proc.pid):
            out.run_start = now
        if kill is not None and kill(out, now):
            os.killpg(proc.pid, signal.SIGKILL)
            out.killed_at = now
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    out.ended = time.monotonic() - out.started
    for r in readers:
        r.join()
    out.returncode = proc.returncode
    text = "".join(stdout).strip()
    if proc.returncode == 0 and text:
        out.summary = json.loads(text.splitlines()[-1])
    return out


# ------------------------------------------------------------------------------------------------ checks
def published(root: Path, dataset: str) -> dict[str, set[str]]:
    """``stage -> versions`` with a manifest under ``root/dataset``."""
    out: dict[str, set[str]] = defaultdict(set)
    for manifest in (root / dataset).glob("*/*/manifest.json"):
        out[manifest.parent.parent.name].add(manifest.parent.name)
    return out


def half_written(root: Path, dataset: str) -> list[str]:
    """Artifact directories visible without a manifest, and artifacts that do not verify."""
    from pipelines.ops.verify import verify_root

    bad = [str(d) for d in (root / dataset).glob("*/*") if d.is_dir() and not (d / "manifest.json").is_file()]
    result = verify_root(root, dataset, mode="full", threads=2)
    bad += [f"{c.path}: {c.status} {c.problem()}" for c in result.checks  # (verify sees those without one too)
            if c.status != "OK" and str(c.path) not in bad]
    return bad


def catalog_problems(root: Path, dataset: str) -> list[str]:
    import duckdb

    on_disk = {(s, v) for s, vs in published(root, dataset).items() for v in vs}
    con = duckdb.connect(str(root / "catalog.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT stage, version FROM artifacts WHERE dataset = ?", [dataset]).fetchall()
        dupes = con.execute("SELECT stage, version, key, step, count(*) FROM metrics WHERE dataset = ? "
                            "GROUP BY ALL HAVING count(*) > 1", [dataset]).fetchall()
        measured = set(con.execute("SELECT DISTINCT stage, version FROM metrics WHERE dataset = ?",
                                   [dataset]).fetchall())
    finally:
        con.close()
    from storage_kernels.catalog import artifact_metrics

    unmeasured = []
    for stage, version in sorted(on_disk - measured):  # every artifact with numeric stats has its metric rows
        manifest = json.loads((root / dataset / stage / version / "manifest.json").read_text())
        if artifact_metrics(manifest.get("stats") or {}, manifest.get("timings") or {}):
            unmeasured.append((stage, version))
    problems = []
    listed = set(rows)
    if len(rows) != len(listed):
        problems.append(f"catalog lists an artifact twice ({len(rows)} rows, {len(listed)} artifacts)")
    if listed != on_disk:
        problems.append(f"catalog and disk differ: only in catalog {sorted(listed - on_disk)}, "
                        f"only on disk {sorted(on_disk - listed)}")
    if dupes:
        problems.append(f"duplicate metric rows: {dupes[:3]}")
    if unmeasured:
        problems.append(f"catalogued without their metric rows: {unmeasured}")
    return problems


def tmp_leftovers(root: Path) -> list[str]:
    tmp = root / ".tmp"
    if not tmp.is_dir():
        return []
    left = [p.name for p in tmp.iterdir() if p.name != "resume"]
    resume = tmp / "resume"
    if resume.is_dir():
        left += [f"resume/{p.name}" for p in resume.iterdir()]
    return left


def mlflow_state(root: Path, dataset: str, victim_pid: int) -> tuple[dict[str, str], list[str], Counter]:
    """``(victim's run id -> status, ids of every RUNNING run, train artifact -> registered versions)``; read
    only (nothing is created when the store or the experiment does not exist yet)."""
    from pipelines.ops.recovery import MLFLOW_OWNER_PREFIX
    from trainer.tracking import ARTIFACT_VERSION_TAG, _mlflow

    if not (root / "mlflow" / "mlflow.db").exists():
        return {}, [], Counter()
    _mlflow()
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{root / 'mlflow' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(f"strata-{dataset}")
    if experiment is None:
        return {}, [], Counter()
    runs = client.search_runs([experiment.experiment_id], max_results=10_000)
    victims = {r.info.run_id: r.info.status for r in runs
               if r.data.tags.get(f"{MLFLOW_OWNER_PREFIX}pid") == str(victim_pid)}
    running = [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    try:
        versions = client.search_model_versions(f"name = 'strata-{dataset}'")
    except Exception:  # no registered model yet
        versions = []
    return victims, running, Counter(v.tags.get(ARTIFACT_VERSION_TAG) for v in versions)


def dagster_state(root: Path, victim_pid: int) -> tuple[dict[str, str], list[str]]:
    """``(victim's run id -> status, ids of every STARTED/STARTING run)``."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from pipelines.ops.recovery import DAGSTER_OWNER_PREFIX

    home = root / "dagster_home"
    if not home.is_dir():
        return {}, []
    with DagsterInstance.from_config(str(home)) as instance:
        stuck = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING]))
        victims = instance.get_runs(RunsFilter(tags={f"{DAGSTER_OWNER_PREFIX}pid": str(victim_pid)}))
    return {r.run_id: r.status.value for r in victims}, [r.run_id for r in stuck]


def orphan_problems(at_kill: tuple[dict[str, str], dict[str, str]], root: Path, dataset: str,
                    victim_pid: int) -> list[str]:
    """After the rerun: nothing left RUNNING/STARTED anywhere; the victim's MLflow runs that were RUNNING at the
    kill are FAILED, its Dagster runs that were STARTED are FAILURE; every train artifact registered once."""
    mlflow_before, dagster_before = at_kill
    victims, running, registered = mlflow_state(root, dataset, victim_pid)
    problems = [f"MLflow run {r} left RUNNING" for r in running]
    problems += [f"victim's MLflow run {r} was RUNNING at the kill, is {victims.get(r)} after the rerun"
                 for r, status in mlflow_before.items() if status == "RUNNING" and victims.get(r) != "FAILED"]
    problems += [f"train artifact {a} registered {n} times" for a, n in registered.items() if n > 1]
    d_victims, stuck = dagster_state(root, victim_pid)
    problems += [f"Dagster run {r} left STARTED" for r in stuck]
    problems += [f"victim's Dagster run {r} was {status} at the kill, is {d_victims.get(r)} after the rerun"
                 for r, status in dagster_before.items() if status in ("STARTED", "STARTING")
                 and d_victims.get(r) != "FAILURE"]
    return problems


# ------------------------------------------------------------------------------------------------ trials
@dataclass
class Calibration:
    """Per dataset: each target stage's window (seconds) in a full run."""

    windows: dict[str, float]


def calibrate(root: Path, dataset_args: list[str]) -> tuple[str, Calibration]:
    """A full run into ``root`` (the warm root afterwards); the dataset name and each stage's window."""
    out = run_strata(root, dataset_args)
    if out.returncode != 0 or out.summary is None:
        raise RuntimeError(f"calibration run failed ({out.returncode}):\n{out.stderr()}")
    dataset = out.summary["dataset"]
    lines = out.stage_lines()
    ends = [lines[s][0] for s in STAGES]
    ingest_seconds = next(a["seconds"] for a in out.summary["artifacts"] if a["stage"] == "ingest")
    windows = {"ingest": max(ingest_seconds + 1.0, 0.5)}
    windows.update({s: max(ends[i] - ends[i - 1], 0.2) for i, s in enumerate(STAGES) if i > 0})
    windows["finish"] = max(out.ended - ends[-1], 0.5)
    return dataset, Calibration(windows)


@dataclass
class Trial:
    trial: int
    dataset: str
    mode: str
    target: str
    offset_s: float
    actual: str = ""
    killed: bool = False
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    published_after_kill: list[str] = field(default_factory=list)
    reused_by_rerun: list[str] = field(default_factory=list)
    victim_seconds: float = 0.0
    rerun_seconds: float = 0.0
    recovered: str = ""
    victim_mlflow_orphans: int = 0  # the victim's MLflow runs left RUNNING by the kill (must end FAILED)
    victim_dagster_orphans: int = 0  # the victim's Dagster runs left STARTED by the kill (must end FAILURE)


_check_lock = threading.Lock()


def run_trial(k: int, seed: int, target: str, spec: dict[str, Any], warm_root: Path, work: Path) -> Trial:
    """Trial ``k``: kill a run at a random moment of ``target``, rerun, check (problems listed, none = ok)."""
    rng = random.Random(seed * 100_003 + k)
    mode = "fresh" if target == "ingest" or rng.random() < 0.5 else "warm"
    window = spec["calibration"].windows[target]
    offset = rng.uniform(0.0, window)
    trial = Trial(k, spec["dataset"], mode, target, round(offset, 3))
    args = list(spec["args"])
    if mode == "warm":
        if not (warm_root / "catalog.duckdb").exists():  # this worker's warm root: one full run first
            full = run_strata(warm_root, args)
            if full.returncode != 0:
                raise RuntimeError(f"building the warm root failed ({full.returncode}): {full.stderr(10)}")
        for item in WARM_OVERRIDES[target](k + 1000 * seed):
            args += ["--set", item]
        root = warm_root
    else:
        root = work / f"trial-{k}"
        shutil.rmtree(root, ignore_errors=True)
    index = STAGES.index(target) if target in STAGES else len(STAGES)

    def kill(out: RunOutput, now: float) -> bool:
        if target == "ingest":
            start = out.run_start
        else:
            seen = out.stage_lines()
            previous = STAGES[index - 1]
            start = seen[previous][0] if previous in seen else None
        return start is not None and now >= start + offset

    victim = run_strata(root, args, dataset=spec["dataset"], kill=kill)
    trial.victim_seconds = round(victim.ended, 2)
    trial.killed = victim.killed_at is not None
    seen = victim.stage_lines()
    trial.actual = next((s for s in STAGES if s not in seen), "finish") if trial.killed else "completed"
    if victim.killed_at is None and victim.returncode != 0:
        trial.problems.append(f"victim failed on its own ({victim.returncode}): {victim.stderr(10)}")
    pid = victim.pid
    dataset = spec["dataset"]
    with _check_lock:
        before = published(root, dataset)
        trial.published_after_kill = sorted(f"{s}/{v}" for s, vs in before.items() for v in vs)
        trial.problems += [f"after kill: {p}" for p in half_written(root, dataset)]
        at_kill = (mlflow_state(root, dataset, pid)[0], dagster_state(root, pid)[0])
        trial.victim_mlflow_orphans = sum(s == "RUNNING" for s in at_kill[0].values())
        trial.victim_dagster_orphans = sum(s in ("STARTED", "STARTING") for s in at_kill[1].values())

    rerun = run_strata(root, args, dataset=dataset)
    trial.rerun_seconds = round(rerun.ended, 2)
    if rerun.returncode != 0 or rerun.summary is None:
        trial.problems.append(f"rerun failed ({rerun.returncode}): {rerun.stderr(15)}")
    else:
        trial.recovered = next((line for _, line in rerun.lines if "recovered after a killed run" in line), "")
        arts = {a["stage"]: a for a in rerun.summary["artifacts"]}
        trial.reused_by_rerun = sorted(s for s, a in arts.items() if a["reused"])
        for stage, a in arts.items():
            was_there = a["version"] in before.get(stage, set())
            if a["reused"] != was_there:
                trial.problems.append(f"rerun {'reused' if a['reused'] else 'rebuilt'} {stage}/{a['version']}, "
                                      f"which was {'' if was_there else 'not '}published before the kill")
        for stage, (_, _, version) in seen.items():  # what the victim finished, the rerun must reuse
            if stage in arts and (arts[stage]["version"] != version or not arts[stage]["reused"]):
                trial.problems.append(f"victim finished {stage}/{version}; the rerun did not reuse it")
        with _check_lock:
            trial.problems += [f"after rerun: {p}" for p in half_written(root, dataset)]
            trial.problems += catalog_problems(root, dataset)
            left = tmp_leftovers(root)
            if left:
                trial.problems.append(f"temp leftovers after the rerun: {left}")
            trial.problems += orphan_problems(at_kill, root, dataset, pid)
    trial.ok = not trial.problems
    if trial.ok and mode == "fresh":
        shutil.rmtree(root, ignore_errors=True)
    return trial


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--minutes", type=float, default=40.0, help="start no trial after this much wall time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="trials run concurrently (each on its own roots)")
    ap.add_argument("--datasets", default="tiny,edgelist", help="comma list of tiny, edgelist")
    ap.add_argument("--stages", default=",".join(TARGETS), help="comma list of target stages (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default: print only)")
    ap.add_argument("--work", type=Path, default=None, help="work dir (default: a temp dir, removed at the end "
                    "unless a trial failed)")
    a = ap.parse_args(argv)

    start = time.monotonic()
    work = a.work or Path(tempfile.mkdtemp(prefix="strata-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    specs: list[dict[str, Any]] = []
    for name in a.datasets.split(","):
        args = (["--dataset", "tiny"] if name == "tiny" else write_edgelist(work / "edgelist-src")) + FAST
        specs.append({"name": name, "args": args})
    rng = random.Random(a.seed)
    # every (dataset, target) in turn, shuffled within each round
    order: list[tuple[int, str]] = []
    while len(order) < a.trials:
        round_ = [(i, t) for i in range(len(specs)) for t in TARGETS if t in a.stages.split(",")]
        rng.shuffle(round_)
        order += round_
    order = order[: a.trials]

    warm_roots = [[work / f"warm-w{w}-{s['name']}" for s in specs] for w in range(a.workers)]
    calibrations: dict[int, tuple[str, Calibration]] = {}
    for i, spec in enumerate(specs):  # worker 0's warm roots calibrate; the others' are built on first use
        calibrations[i] = calibrate(warm_roots[0][i], spec["args"])
        print(f"[kill] calibrated {spec['name']}: " + ", ".join(f"{k} {v:.1f}s" for k, v in
                                                               calibrations[i][1].windows.items()), flush=True)

    trials: list[Trial] = []
    lock = threading.Lock()
    next_k = [0]

    def worker(w: int) -> None:
        while True:
            with lock:
                k = next_k[0]
                if k >= len(order) or time.monotonic() - start > a.minutes * 60:
                    return
                next_k[0] += 1
            i, target = order[k]
            spec = {"dataset": calibrations[i][0], "args": specs[i]["args"], "calibration": calibrations[i][1]}
            try:
                t = run_trial(k, a.seed, target, spec, warm_roots[w][i], work)
            except Exception as e:  # a broken harness is a failed trial, not a lost one
                t = Trial(k, spec["dataset"], "?", target, 0.0, problems=[f"harness: {type(e).__name__}: {e}"])
            with lock:
                trials.append(t)
                print(f"[kill] trial {k}: {t.dataset} {t.mode} target={t.target} actual={t.actual} "
                      f"{'OK' if t.ok else 'FAIL ' + '; '.join(t.problems)[:600]}", flush=True)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    trials.sort(key=lambda t: t.trial)
    by_stage: dict[str, dict[str, int]] = {}
    for t in trials:
        row = by_stage.setdefault(t.actual, {"trials": 0, "passed": 0, "failed": 0, "fresh": 0, "warm": 0})
        row["trials"] += 1
        row["passed" if t.ok else "failed"] += 1
        if t.mode in ("fresh", "warm"):
            row[t.mode] += 1
    result = {
        "command": "python benchmarks/kill_campaign.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seed": a.seed, "workers": a.workers, "trials_run": len(trials),
        "passed": sum(t.ok for t in trials), "failed": sum(not t.ok for t in trials),
        "killed": sum(t.killed for t in trials),
        "mlflow_orphans_at_kill": sum(t.victim_mlflow_orphans for t in trials),
        "dagster_orphans_at_kill": sum(t.victim_dagster_orphans for t in trials),
        "wall_minutes": round((time.monotonic() - start) / 60, 1),
        "datasets": {calibrations[i][0]: {"args": s["args"], "windows_s": calibrations[i][1].windows}
                     for i, s in enumerate(specs)},
        "by_actual_stage": {s: by_stage[s] for s in (*TARGETS, "completed") if s in by_stage},
        "by_target_stage": dict(Counter(t.target for t in trials)),
        "trials": [asdict(t) for t in trials],
    }
    text = json.dumps(result, indent=1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(json.dumps({k: result[k] for k in ("trials_run", "passed", "failed", "killed", "mlflow_orphans_at_kill",
                                             "dagster_orphans_at_kill", "wall_minutes", "by_actual_stage")},
                     indent=1))
    if result["failed"] == 0 and a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"[kill] work dir kept: {work}")
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
