"""``strata run`` on a root with a corrupted artifact fails with one clear line naming the file and digests, exit 2."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from tests.pipelines.ops.test_verify import CFG, SETS, SPEC, _flip, _middle


def test_strata_run_fails_with_the_clear_error(tmp_path: Path) -> None:
    pack = StageRunner(CFG, StrataPaths.at(tmp_path).store()).run_until("pack", checks=False)[-1].artifact
    target = pack.path / "addr_slot.npy"
    _flip(target, _middle(pack, "addr_slot.npy"))
    args = ["run", "--dataset", SPEC, "--root", str(tmp_path), "--until", "pack", "--json"]
    for s in SETS:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2  # bad environment: the disk changed a file; the next run rebuilds it
    assert f"'{target}' expected checksum {pack.files['addr_slot.npy'].checksum} (got blake2b:" in result.stderr
    assert "the next run rebuilds it" in result.stderr and not target.exists()
