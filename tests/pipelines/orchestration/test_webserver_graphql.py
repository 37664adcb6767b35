"""The Dagster webserver on loopback serves Strata's code location: its GraphQL API lists the assets, launches a
materialization of ``tiny`` and reports it successful (a real ``dagster-webserver`` process, the project's
``workspace.yaml``, ``DAGSTER_HOME`` and the data root in a temp dir). About 40 s on a loaded 2-core machine (three
processes start: the webserver, its code server, the run worker): marked ``slow``, run with ``pytest -m slow``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.graph import STAGE_NAMES
from tests import REPO

pytestmark = pytest.mark.slow

_STARTUP_S = 180
_RUN_S = 300
_DAGSTER_YAML = """telemetry:
  enabled: false
run_coordinator:  # launch at once: no daemon in this test
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""

_ASSETS = "{ assetNodes { assetKey { path } groupName jobNames } }"
_LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}"""
_STATUS = """
query Status($runId: ID!) {
  runOrError(runId: $runId) { __typename ... on Run { status } }
}"""
_FAILURES = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection { events { __typename ... on MessageEvent { message } } }
  }
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        reply = json.loads(response.read())
    assert "errors" not in reply, reply["errors"]
    return reply["data"]


@pytest.fixture
def webserver(tmp_path: Path) -> Iterator[str]:
    """The GraphQL URL of a dagster-webserver on 127.0.0.1 serving workspace.yaml (stopped afterwards)."""
    if shutil.which("dagster-webserver", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("dagster-webserver is not installed beside this Python")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(_DAGSTER_YAML)
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "STRATA_HOME": str(tmp_path / "root"), "STRATA_DATASET": "tiny",
           "DAGSTER_DISABLE_TELEMETRY": "yes"}
    env.pop("STRATA_CONFIG", None)
    log = (tmp_path / "webserver.log").open("w")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port),
         "-w", str(REPO / "workspace.yaml")],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        deadline = time.monotonic() + _STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"dagster-webserver exited with {process.returncode}: "
                            f"{(tmp_path / 'webserver.log').read_text()[-3000:]}")
            try:
                if _graphql(url, "{ version }")["version"]:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"dagster-webserver did not answer within {_STARTUP_S} s")
            time.sleep(1.0)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # the webserver and the code server it started
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


def _wait_for_assets(url: str) -> list[dict[str, Any]]:
    """The asset nodes, once the code location has loaded (it loads after the server answers)."""
    deadline = time.monotonic() + _STARTUP_S
    while True:
        nodes = _graphql(url, _ASSETS)["assetNodes"]
        if nodes or time.monotonic() > deadline:
            return nodes
        time.sleep(1.0)


def test_webserver_lists_assets_and_materializes_tiny(webserver: str, tmp_path: Path) -> None:
    nodes = _wait_for_assets(webserver)
    by_name = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    assert set(STAGE_NAMES) <= set(by_name) and {"sample_shards", "sample_merged"} <= set(by_name)
    assert "strata_job" in by_name["ingest"]["jobNames"] and "retrain_job" in by_name["train"]["jobNames"]
    assert by_name["train"]["groupName"] == "training" and by_name["ingest"]["groupName"] == "preprocess"

    settings = {"dataset": "tiny", "sample": {"epochs": 1}, "train": {"epochs": 1}}
    params = {
        "selector": {"repositoryLocationName": "strata", "repositoryName": "__repository__",
                     "jobName": "strata_job", "assetSelection": [{"path": [name]} for name in STAGE_NAMES]},
        "runConfigData": {"execution": {"config": {"in_process": {}}},
                          "resources": {"strata": {"config": {"settings": settings}}}},
    }
    launched = _graphql(webserver, _LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    deadline = time.monotonic() + _RUN_S
    status = launched["run"]["status"]
    while status not in ("SUCCESS", "FAILURE", "CANCELED") and time.monotonic() < deadline:
        time.sleep(2.0)
        status = _graphql(webserver, _STATUS, {"runId": run_id})["runOrError"]["status"]
    if status != "SUCCESS":
        events = _graphql(webserver, _FAILURES, {"runId": run_id})["logsForRun"].get("events", [])
        messages = [e.get("message", "") for e in events if e.get("message")]
        pytest.fail(f"run {run_id} ended {status}: {messages[-10:]}")
    exported = list((tmp_path / "root" / "tiny" / "export").glob("*/manifest.json"))
    assert len(exported) == 1  # the run wrote under STRATA_HOME, the webserver's data root
