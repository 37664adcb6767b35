"""The exit-code contract of ``strata run`` (docs/usage/cli.md, RELIABILITY.md), table-driven, in process.

Bad settings, inputs and environment -- a missing or malformed input file, a non-finite or out-of-range setting, an
unknown setting or policy, a corrupted artifact, a full disk, a read-only filesystem -- exit 2 with exactly one
``error:`` line on stderr naming the setting or file and the problem, whether the error is raised before the run
or inside a stage (a Dagster step). A bug inside a stage exits 1 with one line naming the exception type and the
stage. Besides that line, stderr holds only the run's progress lines (``[strata] <stage>: ...``).

The full disk and the read-only root are real where this process may mount a tmpfs (root with CAP_SYS_ADMIN):
the stage's own writes fail; everywhere a write fault is also injected into the array writer (the errno a full
disk gives, with no file name, as Python's buffered write raises it).

Each case that runs a stage is a Dagster run (seconds); those that repeat another's path are marked slow
(``pytest -m slow tests/pipelines/cli/test_exit_contract.py`` runs them all).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from pipelines import graph
from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.core.errors import EXIT_KNOWN, EXIT_UNKNOWN, describe, describe_remote
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from tests.tmpfs import mounted_tmpfs

runner = CliRunner()
NODES = 60


def _strata(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _error_line(result: Any) -> str:
    """The one ``error:`` line: nothing else on stderr but progress lines, no traceback, no 'caused by'."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("[strata] ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def _edgelist(tmp_path: Path, features: np.ndarray | None = None) -> list[str]:
    """``run`` arguments for a 60-node edge list written to ``tmp_path`` (``features`` replace the good ones)."""
    ids = np.arange(NODES)
    edges = tmp_path / "edges.csv"
    edges.write_text("".join(f"{i},{(i + 1) % NODES}\n{i},{(i + 7) % NODES}\n" for i in ids))
    feats = np.random.default_rng(0).normal(size=(NODES, 4)).astype(np.float32) if features is None else features
    np.save(tmp_path / "features.npy", feats)
    np.save(tmp_path / "labels.npy", ids % 3)
    return ["--dataset", f"edgelist:{edges}", "--set", f"ingest.options.features={tmp_path / 'features.npy'}",
            "--set", f"ingest.options.labels={tmp_path / 'labels.npy'}"]


def _replace_stage(monkeypatch: pytest.MonkeyPatch, name: str, around: Callable[[Callable[..., Any]], Any]) -> None:
    """Make stage ``name`` run ``around(original)(...)`` (the stage graph is frozen: swap its entry)."""
    stage = graph.get_stage(name)
    monkeypatch.setitem(graph._BY_NAME, name, dataclasses.replace(stage, run=around(stage.run)))


def _raising(error: BaseException) -> Callable[[Callable[..., Any]], Any]:
    def around(original: Callable[..., Any]) -> Any:
        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            raise error
        return run
    return around


# -------------------------------------------------------------------- bad settings, inputs: exit 2, one line


def _features(tmp_path: Path, change: Callable[[np.ndarray], np.ndarray]) -> list[str]:
    good = np.random.default_rng(0).normal(size=(NODES, 4)).astype(np.float32)
    return _edgelist(tmp_path, change(good))


def _with_nan(a: np.ndarray) -> np.ndarray:
    a[5, 2] = np.nan
    return a


#: (id, run arguments from tmp_path, the substrings of the one line; {tmp} is tmp_path)
CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    ("lr-inf", lambda t: ["--dataset", "tiny", "--set", "train.lr=inf"],
     ("error: 'train.lr' expected a finite number (got inf)",)),
    ("lr-negative", lambda t: ["--dataset", "tiny", "--set", "train.lr=-1"],
     ("error: 'train.lr' expected a value in range (got -1",)),
    ("dropout-nan", lambda t: ["--dataset", "tiny", "--set", "train.dropout=NaN"],
     ("error: 'train.dropout' expected a finite number (got nan)",)),
    ("unknown-setting", lambda t: ["--dataset", "tiny", "--set", "train.learning_rate=0.1"],
     ("error: 'train.learning_rate' expected a known setting",)),
    ("unknown-section", lambda t: ["--dataset", "tiny", "--set", "trian.lr=0.1"],
     ("error: '--set trian.lr' expected a key starting with one of",)),
    ("bad-policy", lambda t: ["--dataset", "tiny", "--policy", "nosuch"],
     ("error: 'policy' expected one of", "(got 'nosuch')")),
    ("bad-dataset", lambda t: ["--dataset", "nosuch"], ("error: 'dataset' expected a built-in name", "(got 'nosuch')")),
    ("missing-features", lambda t: [*_edgelist(t), "--set", f"ingest.options.features={t / 'nope.npy'}"],
     ("error: '{tmp}/nope.npy' expected a .npy file for 'features' (got no such file)",)),
    ("features-wrong-rows", lambda t: _features(t, lambda a: a[:-1]),
     (f"error: '{{tmp}}/features.npy' expected {NODES} feature rows", f"(got {NODES - 1} rows)")),
    ("features-nan", lambda t: _features(t, _with_nan),
     ("error: '{tmp}/features.npy: features[5]' expected finite values (got nan in column 2)",)),
    ("features-text", lambda t: [*_edgelist(t), "--set", f"ingest.options.features={t / 'edges.csv'}"],
     ("error: '{tmp}/edges.csv' expected",)),
    ("edges-garbage", lambda t: [*_edgelist(t), "--dataset", f"edgelist:{t / 'features.npy'}"],
     ("error: '{tmp}/features.npy",)),
]


#: Cases that run a stage like another case does (each a Dagster run of a few seconds): `pytest -m slow`.
_SLOW = frozenset({"bad-dataset", "features-wrong-rows", "features-text", "edges-garbage"})


@pytest.mark.parametrize(("make_args", "expected"), [
    pytest.param(make, expected, id=name, marks=[pytest.mark.slow] if name in _SLOW else [])
    for name, make, expected in CASES])
def test_bad_settings_and_inputs_exit_2_with_one_line(tmp_path: Path, make_args: Callable[[Path], list[str]],
                                                     expected: tuple[str, ...]) -> None:
    result = _strata("run", *make_args(tmp_path), "--root", str(tmp_path / "root"), "--until", "ingest", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN, result.stderr
    for part in expected:
        assert part.format(tmp=tmp_path) in line, line
    assert result.stdout == ""


@pytest.mark.slow
def test_a_corrupted_artifact_exits_2_naming_the_file(tmp_path: Path) -> None:
    ingest = StageRunner(PipelineConfig.load(dataset="tiny"), StrataPaths.at(tmp_path).store()).result("ingest")
    target = ingest.artifact.path / "features.npy"
    info = ingest.artifact.files["features.npy"]
    with open(target, "r+b") as f:  # one flipped bit mid-file
        f.seek(info.data_offset + (info.bytes - info.data_offset) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    result = _strata("run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "reorder", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN
    assert line.startswith(f"error: '{target}' expected checksum {info.checksum} (got blake2b:"), line
    assert "the next run rebuilds it" in line and not target.exists()
    again = _strata("run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "ingest", "--json")
    assert again.exit_code == 0, again.stderr  # rebuilt


# ------------------------------------------------------------------ environment: a full disk, a read-only root


def test_a_full_disk_inside_a_stage_exits_2_naming_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected: the array writer's write fails as a full disk makes Python's buffered write fail (no file name)."""
    import storage_kernels.arrays as arrays

    def full(*args: Any, **kwargs: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(arrays, "_write_rows", full)
    result = _strata("run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "ingest", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN
    assert line.startswith(f"error: '{tmp_path / '.tmp'}/"), line
    assert line.endswith("' expected free space on its filesystem (got ENOSPC: No space left on device)"), line


@pytest.fixture
def tmp_on_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A data root whose ``.tmp`` (where every build writes) is an 8 MiB tmpfs of its own; skipped where this
    process may not mount one. The rest of the root (Dagster's and the catalog's databases, the locks) stays on
    the test's disk: the fault hits the stage's writes, not the run's bookkeeping."""
    root = tmp_path / "root"
    mount = root / ".tmp"
    mount.mkdir(parents=True)
    with mounted_tmpfs(mount, "8m"):
        yield root


def _fill(path: Path, leave: int = 0) -> None:
    """Take every free block of ``path``'s filesystem, as another process filling the disk would, then give back
    ``leave`` bytes."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        if leave:
            f.truncate(f.tell() - leave)


def _at_start(action: Callable[[], None], undo: Callable[[], None]) -> Callable[[Callable[..., Any]], Any]:
    """``action`` when the stage starts, ``undo`` when it ends (however it ends)."""
    def around(original: Callable[..., Any]) -> Any:
        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            action()
            try:
                return original(*args, **kwargs)
            finally:
                undo()
        return run
    return around


@pytest.mark.slow
def test_a_really_full_disk_inside_a_stage_exits_2(tmp_on_tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_on_tmpfs
    filler = root / ".tmp" / "filler"

    _replace_stage(monkeypatch, "ingest", _at_start(lambda: _fill(filler), lambda: filler.unlink(missing_ok=True)))
    result = _strata("run", "--dataset", "tiny", "--root", str(root), "--until", "ingest", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN
    assert line.startswith(f"error: '{root / '.tmp'}/"), line
    assert line.endswith("' expected free space on its filesystem (got ENOSPC: No space left on device)"), line


@pytest.mark.slow
def test_a_full_disk_under_a_memory_mapped_array_exits_2_not_sigbus(tmp_on_tmpfs: Path) -> None:
    """Room for a few blocks of ingest's output but not for its edges. Ingest used to place the edges into a
    memory-mapped file whose blocks were allocated lazily, so the first write into a missing one killed the
    process with SIGBUS (exit 135, no line); maps are reserved up front now (ArrayWriter.allocate, tested in
    tests/storage_kernels/test_arrays_reserve.py) and ingest writes its edges sequentially: ENOSPC either way,
    naming the build's file or directory. A real process: a SIGBUS must not take pytest down with it."""
    root = tmp_on_tmpfs
    _fill(root / ".tmp" / "filler", leave=64 << 10)  # tiny's edges need ~170 KiB
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--dataset", "tiny", "--root", str(root),
                           "--until", "ingest", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_KNOWN, (done.returncode, done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("[strata] ")]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert line.startswith(f"error: '{root / '.tmp'}/"), line
    assert line.endswith("' expected free space on its filesystem (got ENOSPC: No space left on device)"), line
    assert [p.name for p in (root / ".tmp").iterdir() if not p.name.startswith(("filler", "resume"))] == [], \
        "the failed build left files behind"


@pytest.mark.slow
def test_a_read_only_root_inside_a_stage_exits_2(tmp_on_tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_on_tmpfs

    def remount(mode: str) -> Callable[[], None]:
        return lambda: subprocess.run(["mount", "-o", f"remount,{mode}", str(root / ".tmp")], check=True)

    _replace_stage(monkeypatch, "ingest", _at_start(remount("ro"), remount("rw")))
    result = _strata("run", "--dataset", "tiny", "--root", str(root), "--until", "ingest", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN
    assert line.startswith(f"error: '{root / '.tmp'}/"), line
    assert line.endswith("' expected a writable filesystem (got EROFS: Read-only file system)"), line


# ------------------------------------------------------------------------------------- bugs: exit 1, one line


@pytest.mark.parametrize("error", [
    KeyError("boom"),
    pytest.param(RuntimeError("kaboom"), marks=pytest.mark.slow),
    pytest.param(ValueError("operands could not be broadcast together"), marks=pytest.mark.slow),
    pytest.param(ZeroDivisionError("division by zero"), marks=pytest.mark.slow)], ids=lambda e: type(e).__name__)
def test_a_bug_inside_a_stage_exits_1_naming_the_type_and_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 error: Exception) -> None:
    _replace_stage(monkeypatch, "ingest", _raising(error))
    result = _strata("run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "ingest", "--json")
    line = _error_line(result)
    assert result.exit_code == EXIT_UNKNOWN
    assert line.startswith("error: internal error in stage 'ingest' (Dagster run "), line
    assert f"): {type(error).__name__}: {str(error)} (rerun with `strata --debug ...`" in line, line
    debug = _strata("--debug", "run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "ingest", "--json")
    assert debug.exception is error  # raised as is: its traceback shows


def test_a_failed_check_exits_1_and_an_error_raised_by_a_check_follows_the_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check's finding that fails is a broken invariant (exit 1, one line); an exception a check raises (no
    stage function failed: Dagster's record of the check step is all there is) gets the rules of any error."""
    import pipelines.checks.graph as checks
    from pipelines.checks import Finding

    def failing(features: Any, name: str = "features.npy") -> Finding:
        finding = Finding()
        finding.fail(f"'{name}' expected finite values (got 1 NaN/inf)")
        return finding

    monkeypatch.setattr(checks, "check_features_finite", failing)
    args = ["run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "ingest", "--json"]
    result = _strata(*args)
    line = _error_line(result)
    assert result.exit_code == EXIT_UNKNOWN
    assert line.startswith("error: check 'ingest:features_finite' failed: '") and "expected finite values" in line

    def unreadable(features: Any, name: str = "features.npy") -> Finding:
        raise OSError(errno.EIO, os.strerror(errno.EIO), name)

    monkeypatch.setattr(checks, "check_features_finite", unreadable)
    result = _strata(*args)
    line = _error_line(result)
    assert result.exit_code == EXIT_KNOWN
    assert line.startswith(f"error: '{tmp_path}/tiny/ingest/") and line.endswith(
        "/features.npy' expected a readable device (got EIO: Input/output error)"), line


@pytest.mark.slow
def test_the_dagster_run_log_carries_the_same_line(tmp_path: Path) -> None:
    from dagster import DagsterInstance

    result = _strata("run", *_features(tmp_path, _with_nan), "--root", str(tmp_path / "root"), "--until", "ingest",
                     "--json")
    line = _error_line(result)
    instance = DagsterInstance.from_config(str(tmp_path / "root" / "dagster_home"))
    run = instance.get_runs(limit=1)[0]
    messages = [entry.user_message for entry in instance.all_logs(run.run_id)]
    assert line in messages, messages


# --------------------------------------------------------------------------------------- the rules themselves


def test_the_rules_for_errors_known_by_name_match_those_for_exceptions() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/r/.tmp/x")
    assert describe_remote([("OSError", "OSError: [Errno 28] No space left on device: '/r/.tmp/x'")]) == describe(full)
    assert describe_remote([("KeyError", "KeyError: 'boom'")])[1] == EXIT_UNKNOWN  # a KeyError's str is a repr
    assert describe_remote([("KeyError", "KeyError: \"'f.npy' expected a file (got none)\"")]) == (
        "'f.npy' expected a file (got none)", EXIT_KNOWN)
    assert describe_remote([("DagsterExecutionStepExecutionError", "Error in step"),
                            ("ArtifactCorrupted", "storage_kernels.integrity.ArtifactCorrupted: 'a.npy' expected "
                                                  "checksum x (got y)")]) == ("'a.npy' expected checksum x (got y)",
                                                                              EXIT_KNOWN)
    assert describe(KeyError("boom"))[1] == EXIT_UNKNOWN
    long, code = describe(ValueError("'x.npy' expected one of " + "abc, " * 1000 + "or d (got 'e')"))
    assert code == EXIT_KNOWN and len(long) <= 1000 and long.endswith("(got 'e')")  # a long line keeps its got
    assert describe(RuntimeError("'x' expected"))[1] == EXIT_KNOWN
    try:
        try:
            raise ValueError("'a.npy' expected 3 rows (got 2)")
        except ValueError:
            raise KeyError("boom")  # noqa: B904 - a bug while handling bad input is still a bug
    except KeyError as e:
        assert describe(e)[1] == EXIT_UNKNOWN
