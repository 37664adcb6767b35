"""``strata export --web DIR [--screenshot PNG]``: the export stage's extra options.

After the stages run, ``--web`` copies the ``export`` artifact's web folder to ``DIR`` with onnxruntime-web
from the npm cache (:func:`pipelines.web.app.copy_web`); ``--screenshot`` then opens ``DIR/index.html`` in
headless Chromium (:mod:`pipelines.web.browser`) and saves a PNG once the predictions table is filled. The summary
gets a ``web`` entry (directory, files, where the page loads onnxruntime-web from, screenshot), which
:func:`web_lines` puts in words: where the folder is, how to serve it, and, when onnxruntime-web was not in the
npm cache, that the page will load it from a CDN (and how to bundle it: ``make web-runtime``), also on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from pipelines.cli.stage_options import StageOptions, option_param

__all__ = ["EXPORT_OPTIONS", "web_lines"]

def _cdn_note(info: dict[str, Any]) -> str:
    from pipelines.web.app import ORT_WEB_VERSION

    return (f"onnxruntime-web NOT bundled (not in the npm cache {info['npm_cache']}): the page will load it from "
            f"{info['runtime']} and needs the internet; bundle it with `make web-runtime` (npm install --prefix "
            f"{info['npm_cache']} onnxruntime-web@{ORT_WEB_VERSION}), then export again")


def web_lines(info: dict[str, Any]) -> list[str]:
    """What ``--web`` did, for people: the folder, how to serve it, where the page gets onnxruntime-web."""
    lines = [f"Web app:    {info['dir']} ({len(info['files'])} files; serve it: "
             f"python -m http.server -d {info['dir']} 8000)"]
    lines.append(f"Runtime:    onnxruntime-web bundled in {info['dir']}/ort/ (the folder works offline)"
                 if info["bundled"] else f"Runtime:    {_cdn_note(info)}")
    if info.get("screenshot"):
        lines.append(f"Screenshot: {info['screenshot']} ({info.get('page_status')})")
    return lines


def _export_hook(web: Path | None, screenshot: Path | None, variant: str | None
                 ) -> Callable[[dict[str, Any]], None] | None:
    if screenshot is not None and web is None:
        raise typer.BadParameter("'--screenshot' expected together with --web DIR (the folder it opens)",
                                 param_hint="--screenshot")
    if web is None:
        return None

    def after(summary: dict[str, Any]) -> None:
        from pipelines.web.app import copy_web

        export = next((a for a in summary["artifacts"] if a["stage"] == "export"), None)
        if export is None:
            raise RuntimeError("'export' expected among the run's artifacts (got none)")
        info = copy_web(Path(export["path"]), web)
        if not info["bundled"]:  # said now, on stderr, in --json mode too: the folder is not self-contained
            from pipelines.cli.options import err

            err.print(f"strata export: {_cdn_note(info)}", markup=False, highlight=False)
        if screenshot is not None:
            from pipelines.web.browser import open_web

            page = open_web(web, variant=variant, screenshot=screenshot)
            if page["state"] != "done":
                raise RuntimeError(f"'{web}/index.html' expected predictions in headless Chromium "
                                   f"(got {page['state']}: {page['error']})")
            info.update(screenshot=str(screenshot), page_status=page["status"])
        summary["web"] = info

    return after


EXPORT_OPTIONS = StageOptions(
    params={
        "web": option_param(
            "web", typer.Option(None, "--web", help="Copy the browser app (index.html, model variants, subgraph, "
                                "onnxruntime-web from the npm cache: `make web-runtime`; without it the page loads it "
                                "from a CDN) to this directory.", file_okay=False), Path | None),
        "screenshot": option_param(
            "screenshot", typer.Option(None, "--screenshot", help="With --web: open the page in headless Chromium "
                                       "and save a PNG here.", dir_okay=False), Path | None),
        "variant": option_param(
            "variant", typer.Option(None, "--variant", help="With --screenshot: the model variant the page runs "
                                    "(fp32, fp16, int8; default fp32)."), str | None),
    },
    hook=_export_hook,
)
