"""Running a script of ``benchmarks/`` the way a user does (a child process from the repository root) and reading
the JSON report it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_benchmark_script(script: str, args: list[str], tmp_path: Path, timeout_s: float = 600) -> dict[str, Any]:
    """``python benchmarks/<script> --root <tmp>/root <args> --out <tmp>/report.json``; its report, after
    asserting it exited 0 (the stderr tail is the failure message)."""
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--root", str(tmp_path / "root"),
                           *args, "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())
