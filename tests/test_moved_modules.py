"""Old module names answer with the module of their new name: the same object, so nothing is loaded twice."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import pipelines
import trainer
from storage_kernels import moved
from tests import REPO


@pytest.mark.parametrize("old, new", sorted({**pipelines.MOVED, **trainer.MOVED}.items()))
def test_every_old_name_is_its_new_module(old: str, new: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is importlib.import_module(new)


def test_a_module_under_a_moved_package_is_the_same_object() -> None:
    from pipelines.methods.policies import POLICIES, tiers

    with pytest.warns(DeprecationWarning, match="pipelines.methods.policies"):
        old_tiers = importlib.import_module("pipelines.policies.tiers")
    assert old_tiers is tiers
    assert importlib.import_module("pipelines.policies").POLICIES is POLICIES  # one registry, not two


def test_the_old_imports_of_plugins_still_work() -> None:
    """What docs/EXTENDING.md's examples imported before the regroup (a plugin written then)."""
    code = ("from pipelines.partitioners import PARTITIONERS, Partitioner\n"
            "from pipelines.partitioners.partgraph import capacity, enforce_capacity\n"
            "from pipelines.stages.graphio import GraphArrays\n"
            "from pipelines.orders import strategy\n"
            "from pipelines.policies import Policy, TierPlan, register_policy\n"
            "from pipelines.policies.tiers import assign_tiers\n"
            "from pipelines.samplers import SAMPLERS, Sampler\n"
            "from pipelines.sources import SOURCE_KINDS, SourceKind\n"
            "from pipelines.sources.options import parse_int\n"
            "from pipelines.sources.synthetic import synthetic_source\n"
            "from pipelines.sources.linksplit import LinkSplit\n"
            "from pipelines.definitions import defs\n"
            "from trainer.split import LayerwiseSplit\n"
            "import pipelines.methods.policies as new\n"
            "assert register_policy is new.register_policy\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_python_dash_m_runs_the_new_module_under_the_old_name() -> None:
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-m", "pipelines.bench_worker"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "usage: python -m pipelines.bench.worker JOB.json OUT.json" in done.stderr


def test_names_that_never_moved_are_left_to_the_normal_import() -> None:
    assert moved.moved_name("pipelines.config") is None
    assert moved.moved_name("pipelines.benchmark") is None  # a prefix of a moved name is not a match
    assert moved.moved_name("pipelines.bench_worker") == "pipelines.bench.worker"
    assert moved.moved_name("pipelines.policies.ginex") == "pipelines.methods.policies.ginex"
    assert moved.moved_name("pipelines.policies.diskgnn") == "pipelines.methods.policies.diskgnn.policy"


def test_a_move_into_its_own_old_name_is_refused() -> None:
    with pytest.raises(ValueError, match="'moved' expected a new place outside the old name"):
        moved.install_moved({"pipelines.x": "pipelines.x.y"})
