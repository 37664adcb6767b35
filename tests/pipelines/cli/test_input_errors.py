"""Bad input gets one clear line: range-checked settings, malformed config files, unusable roots, OS and
database errors escaping a command (exit 2, a traceback only with --debug), and source errors that name the
file without quoting it."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.cli.errors import describe
from pipelines.config import PipelineConfig
from pipelines.methods.sources.edgelist import edgelist_source, load_npy
from pipelines.methods.sources.ogb import ogb_source
from tests.pipelines.source_fixtures import hand_graph, write_ogb_dir

runner = CliRunner()
SECRET = "root:x:0:0:SECRET-LINE:/root:/bin/bash"


# ------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(("override", "message"), [
    ("sample.fanouts=[0]", "'sample.fanouts' expected a non-empty list of neighbours per hop, each >= 1 or -1 "
                           "for all (got [0])"),
    ("sample.fanouts=[]", "'sample.fanouts' expected a non-empty list"),
    ("sample.fanouts=[5,-2]", "(got [5, -2])"),
    ("sample.seed=-1", "'sample.seed' expected >= 0 (got -1)"),
    ("partition.seed=-5", "'partition.seed' expected >= 0 (got -5)"),
    ("sample.batch_size=0", "'sample.batch_size' expected > 0 (got 0)"),
    ("plan.cpu_cache_fraction=1.5", "'plan.cpu_cache_fraction' expected <= 1"),
    ("train.num_layers=3", "'train.num_layers' expected 0 or len(sample.fanouts) = 2 (got 3)"),
    ("train.lr=0", "'train.lr' expected a value in range (got 0.0)"),
    ("train.lr=inf", "'train.lr' expected a finite number (got inf)"),
    ("train.dropout=NaN", "'train.dropout' expected a finite number (got nan)"),
    ("plan.cpu_cache_fraction=Infinity", "'plan.cpu_cache_fraction' expected a finite number (got inf)"),
    ("export.model_name=a b", "'export.model_name' expected a match of"),
])
def test_out_of_range_settings_are_refused(override: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        PipelineConfig.load(overrides=[override])
    assert message in str(info.value)


def test_all_neighbours_is_a_valid_fanout() -> None:
    assert PipelineConfig.load(overrides=["sample.fanouts=[5,-1]"]).sample.fanouts == [5, -1]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "sample:\n  fanouts: [1, 2\n  batch_size: 3\n" + SECRET + "\n", "expected valid YAML (got a "
                                                                                   "syntax error at line"),
    ("bad.json", '{"sample": {"fanouts": [1,}}', "expected valid JSON (got a syntax error at line 1, column"),
    ("list.yaml", "- 1\n- 2\n", "expected a mapping at the top level (got list)"),
])
def test_malformed_config_files_name_the_position_not_the_text(tmp_path: Path, name: str, text: str,
                                                                message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        PipelineConfig.load(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert "SECRET" not in str(info.value)


def test_binary_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="expected UTF-8 text"):
        PipelineConfig.load(path)


# ------------------------------------------------------------------------------------------ the CLI


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_cli_malformed_yaml_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("sample: [\n" + SECRET)
    result = runner.invoke(app, ["run", "--config", str(config), "--root", str(tmp_path / "r")])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "expected valid YAML" in line and "SECRET" not in line
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_cli_root_that_is_a_file_exits_2(tmp_path: Path) -> None:
    root = tmp_path / "afile"
    root.write_text("x")
    for args in (["run", "--dataset", "tiny"], ["catalog", "ls"], ["catalog", "rebuild"]):
        result = runner.invoke(app, [*args, "--root", str(root)])
        assert result.exit_code == 2, (args, result.output)
        assert "'--root' expected a directory (got a file:" in _one_error_line(result)


def test_a_missing_input_file_or_option_exits_2(tmp_path: Path) -> None:
    """The source's errors surface inside the ingest stage (a Dagster step), and still exit 2 as bad input."""
    edges = tmp_path / "e.csv"
    edges.write_text("0,1\n1,2\n")
    np.save(tmp_path / "y.npy", np.array([0, 1, 0]))
    base = ["ingest", "--dataset", f"edgelist:{edges}", "--root", str(tmp_path / "r")]
    for sets, message in (([], "'option features' expected for edgelist sources, e.g. --set "
                                "ingest.options.features=PATH.npy (got none)"),
                          ([f"ingest.options.features={tmp_path / 'nope.npy'}",
                            f"ingest.options.labels={tmp_path / 'y.npy'}"],
                           f"'{tmp_path / 'nope.npy'}' expected a .npy file for 'features' (got no such file)")):
        result = runner.invoke(app, [*base, *(a for s in sets for a in ("--set", s))])
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.stderr


def test_exit_code_of_a_stage_failure() -> None:
    from pipelines.cli.errors import EXIT_KNOWN, EXIT_UNKNOWN, exit_code_of

    assert exit_code_of("ValueError", "'x.npy' expected 3 labels (got 2)") == EXIT_KNOWN
    assert exit_code_of("FileNotFoundError", " 'x.npy' expected a .npy file") == EXIT_KNOWN
    assert exit_code_of("ValueError", "too many values to unpack") == EXIT_UNKNOWN  # not the project's message
    assert exit_code_of("ArtifactCorrupted", "'a.npy' expected checksum") == EXIT_KNOWN  # the disk changed it
    assert exit_code_of("ZeroDivisionError", "'x' expected") == EXIT_UNKNOWN


def test_cli_bad_fanouts_exit_2_before_writing(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dataset", "tiny", "--root", str(tmp_path / "r"), "--set",
                                 "sample.fanouts=[0]"])
    assert result.exit_code == 2
    assert "'sample.fanouts' expected" in _one_error_line(result)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("error", "expected"), [
    (OSError(errno.ENOSPC, "No space left on device", "/data/x.npy"),
     "'/data/x.npy' expected free space on its filesystem (got ENOSPC: No space left on device)"),
    (PermissionError(errno.EACCES, "Permission denied", "/data/root"),
     "'/data/root' expected permission to use it (got EACCES: Permission denied)"),
    (OSError(errno.EROFS, "Read-only file system", "/ro"), "'/ro' expected a writable filesystem (got EROFS"),
    (sqlite3.OperationalError("database or disk is full"),
     "'database' expected free space on the disk (got OperationalError: database or disk is full)"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "expected a writable database file"),
])
def test_cli_turns_os_and_database_errors_into_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        error: BaseException, expected: str) -> None:
    """A fault injected where a command opens the root: exit 2 and one line; the traceback only with --debug."""
    from pipelines.core import paths as settings

    def fail(*args, **kwargs):
        raise RuntimeError("wrapped") from error  # the cause is what the user needs to see

    monkeypatch.setattr(settings, "resolve_root", fail)
    result = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert _one_error_line(result) == f"error: {describe(error)[0]}"
    assert expected in result.stderr
    debug = runner.invoke(app, ["--debug", "catalog", "ls", "--root", str(tmp_path)])
    assert debug.exit_code != 0 and isinstance(debug.exception, RuntimeError)  # raised: the traceback shows


def test_cli_unknown_error_is_one_line_with_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.core import paths as settings

    def fail(root=None):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(settings, "resolve_root", fail)
    result = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert _one_error_line(result) == ("error: internal error: ZeroDivisionError: boom (rerun with "
                                       "`strata --debug ...` for the traceback)")
    monkeypatch.setenv("STRATA_DEBUG", "1")
    assert isinstance(runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path)]).exception, ZeroDivisionError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_cli_read_only_root_exits_2(tmp_path: Path) -> None:  # pragma: no cover - CI runs unprivileged
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        result = runner.invoke(app, ["run", "--dataset", "tiny", "--root", str(root / "sub")])
        assert result.exit_code == 2 and "expected permission" in _one_error_line(result)
    finally:
        root.chmod(0o700)


# ------------------------------------------------------------------------------------- source files


def _arrays(tmp_path: Path) -> dict[str, Path]:
    g = hand_graph()
    out = {}
    for key in ("features", "labels"):
        out[key] = tmp_path / f"{key}.npy"
        np.save(out[key], g[key])
    return out


def test_edgelist_errors_never_quote_the_file(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text(SECRET.replace(":", "") + "\n")
    with pytest.raises(ValueError) as info:
        edgelist_source(path, **_arrays(tmp_path))
    assert str(path) in str(info.value) and "SECRET" not in str(info.value)
    npy = tmp_path / "f.npy"
    npy.write_text(SECRET)
    with pytest.raises(ValueError) as info:
        load_npy(npy, "features")
    assert str(npy) in str(info.value) and "root" not in str(info.value).replace(str(tmp_path), "")


def test_edgelist_csv_parse_errors_never_quote_the_row(tmp_path: Path) -> None:
    path = tmp_path / "edges.csv"
    path.write_text("0,1\n1,2\n2,SECRET-VALUE\n")
    with pytest.raises(ValueError) as info:
        list(edgelist_source(path, num_nodes=6, **_arrays(tmp_path)).edge_chunks())
    assert str(path) in str(info.value) and "SECRET" not in str(info.value)


def test_ogb_csv_errors_never_quote_the_row(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "ogb", gz=False)
    with open(root / "raw" / "edge.csv", "a") as f:
        f.write("3,SECRET-VALUE\n4,5,6,SECRET-ROW\n")
    source = ogb_source(root)
    with pytest.raises(ValueError) as info:
        list(source.edge_chunks())
    assert "edge.csv" in str(info.value) and "SECRET" not in str(info.value)


def test_the_projects_own_message_wins_over_its_cause() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/d/x.npy")
        except OSError as cause:
            raise ValueError("'/d/x.npy' expected a .npy array for 'features' (got OSError)") from cause
    except ValueError as e:
        assert describe(e) == ("'/d/x.npy' expected a .npy array for 'features' (got OSError)", 2)
    assert describe(KeyError("'f.npy' expected one of the files (got none)")) == (
        "'f.npy' expected one of the files (got none)", 2)
