"""Strata's tests, mirroring the packages (``tests/pipelines/<subpackage>/`` follows ``pipelines/<subpackage>/``)."""

from pathlib import Path

#: The checkout under test (its packages, workspace.yaml, docs), wherever a test file sits below tests/.
REPO = Path(__file__).resolve().parent.parent
