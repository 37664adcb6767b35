"""``python -m pipelines.cli.dagster_dev (-w FILE | -m MODULE) --port P --host H``: Dagster's local UI (webserver
and daemon) without the superseded ``dagster dev`` command.

Dagster 1.13 marks ``dagster dev`` superseded by ``dg dev`` (package ``dagster-dg-cli``, which Strata does not
depend on) and warns on every start. ``dg dev`` given a workspace file or a module does nothing but call
``dagster._cli.dev.dev_command_impl`` with them; this module makes the same call, so ``strata ui`` runs what
``dg dev -w workspace.yaml`` runs, with ``dagster dev``'s defaults. Where that function is missing or takes other
arguments (another Dagster version) it runs ``dagster dev`` instead, warning and all.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Sequence

__all__ = ["DEV_IMPL_PARAMS", "dev_impl", "main"]

#: The parameters of ``dev_command_impl`` this module passes (Dagster 1.13; ``dg dev`` passes the same).
DEV_IMPL_PARAMS = ("code_server_log_level", "log_level", "log_format", "port", "host",
                   "use_legacy_code_server_behavior", "shutdown_pipe", "verbose", "workspace_opts",
                   "live_data_poll_rate", "db_statement_timeout", "db_pool_recycle", "db_pool_max_overflow")


def dev_impl() -> tuple[object, type] | None:
    """``(dev_command_impl, WorkspaceOpts)`` of the installed Dagster when they are what this module expects."""
    try:
        from dagster._cli.dev import dev_command_impl
        from dagster._cli.workspace.cli_target import WorkspaceOpts
    except ImportError:
        return None
    if tuple(inspect.signature(dev_command_impl).parameters) != DEV_IMPL_PARAMS:
        return None
    return dev_command_impl, WorkspaceOpts


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and run the UI until it is interrupted (SIGINT stops the webserver and the daemon)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m pipelines.cli.dagster_dev", description=__doc__.split("\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-w", "--workspace", help="Workspace YAML file.")
    target.add_argument("-m", "--module-name", help="Module holding the Definitions.")
    parser.add_argument("--port", default=None)
    parser.add_argument("--host", default=None)
    args = parser.parse_args(argv)
    found = dev_impl()
    if found is None:  # another Dagster: its own command (which may warn)
        os.execv(sys.executable, [sys.executable, "-m", "dagster", "dev", *argv])
    dev_command_impl, workspace_opts = found
    dev_command_impl(  # type: ignore[operator]
        code_server_log_level="warning", log_level="info", log_format="colored", port=args.port, host=args.host,
        use_legacy_code_server_behavior=False, shutdown_pipe=None, verbose=False,
        workspace_opts=workspace_opts(workspace=[args.workspace] if args.workspace else None,
                                      module_name=[args.module_name] if args.module_name else None),
        live_data_poll_rate="2000", db_statement_timeout=None, db_pool_recycle=None, db_pool_max_overflow=None)


if __name__ == "__main__":
    main()
