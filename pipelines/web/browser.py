"""Open a web folder in headless Chromium: serve it on loopback, wait for the page, read the DOM, screenshot.

Chromium is driven through the DevTools protocol over ``--remote-debugging-pipe`` (JSON messages, each ended
by a NUL byte, on file descriptors 3 and 4), so no websocket client or npm package is needed. Used by
``strata export --web DIR --screenshot PNG`` and the browser tests.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Chromium", "find_chromium", "serve"]

_TRAMPOLINE = ("import fcntl, os, sys\n"
               "r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD_CLOEXEC, 10) for fd in sys.argv[1:3])\n"
               "os.dup2(r, 3)\nos.dup2(w, 4)\nos.execvp(sys.argv[3], sys.argv[3:])\n")
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable: ``$STRATA_CHROMIUM``, else the first of the usual names on PATH."""
    explicit = os.environ.get("STRATA_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((path for name in _CANDIDATES if (path := shutil.which(name))), None)


class _Handler(http.server.SimpleHTTPRequestHandler):
    # module scripts must come with a JavaScript type; instantiateStreaming wants application/wasm
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def serve(directory: str | Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port) for the block; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Chromium:
    """A headless Chromium with one page, driven over the DevTools pipe. Use as a context manager."""

    def __init__(self, executable: str | None = None, width: int = 1100, height: int = 900) -> None:
        found = executable or find_chromium()
        if found is None:
            raise FileNotFoundError("'chromium' expected on PATH or as $STRATA_CHROMIUM (got none; Debian: "
                                    "apt-get install chromium)")
        self._profile = tempfile.TemporaryDirectory(prefix="strata-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [found, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-dev-shm-usage", f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "about:blank"]
        # the browser reads commands on fd 3 and writes replies on fd 4: a small Python trampoline maps the pipe
        # ends there and execs it (preexec_fn is unsafe with threads; sh cannot name fds above 9)
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(to_browser_r),
                                       str(from_browser_w), *args], pass_fds=(to_browser_r, from_browser_w),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ protocol
    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Send one DevTools command (to the page once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"'chromium {method}' failed: {reply['error'].get('message')}")
                return reply.get("result", {})

    def _read(self, deadline: float, method: str) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"'chromium {method}' expected a reply (got none in time)")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                stderr = self._proc.stderr.read().decode(errors="replace")[-2000:] if self._proc.stderr else ""
                raise RuntimeError(f"'chromium' exited (code {self._proc.poll()}): {stderr}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    # ------------------------------------------------------------------------------------------ page
    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"'page' expression failed: {result['exceptionDetails'].get('text')} "
                               f"({result['exceptionDetails'].get('exception', {}).get('description')})")
        return result["result"].get("value")

    def open(self, url: str, ready: str, timeout: float = 60.0) -> Any:
        """Navigate to ``url`` and poll until the expression ``ready`` is truthy; returns its value."""
        self.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # the document may be between navigations
                value = self.evaluate(ready)
                if value:
                    return value
            time.sleep(0.1)
        raise TimeoutError(f"'{url}' expected {ready} within {timeout:.0f} s (got a page still loading)")

    def screenshot(self, path: str | Path) -> Path:
        """Write a PNG of the whole page to ``path``."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": size["width"],
                                                             "height": size["height"], "scale": 1}})
        path = Path(path)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        """Close the browser (politely, then by signal) and remove its profile."""
        if self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self._session = None
                self.call("Browser.close", timeout=5)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._proc.stderr:
            self._proc.stderr.close()
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Poll expression: the page's final state (``done`` or ``error``), once it has one.
PAGE_SETTLED = "['done', 'error'].includes(document.body?.dataset.state) && document.body.dataset.state"
#: The predictions table as JSON rows (``node``: an integer id, or the name of a node of a graph with string ids).
PAGE_ROWS = ("Array.from(document.querySelectorAll('#predictions tbody tr')).map(r => ({node: /^-?[0-9]+$/.test("
             "r.dataset.node) ? Number(r.dataset.node) : r.dataset.node,"
             " predicted: Number(r.dataset.predicted), probability: Number(r.dataset.probability)}))")


def open_web(directory: str | Path, variant: str | None = None, screenshot: str | Path | None = None,
             timeout: float = 60.0) -> dict[str, Any]:
    """Open a web folder's ``index.html`` in headless Chromium and return ``{"state", "status", "rows",
    "variant", "error"}`` read from the DOM; ``screenshot`` writes a PNG of the page."""
    with Chromium() as browser, serve(directory) as base:
        url = base + "index.html" + (f"?variant={variant}" if variant else "")
        state = browser.open(url, PAGE_SETTLED, timeout=timeout)
        out = {"state": state, "status": browser.evaluate("document.getElementById('status').textContent"),
               "variant": browser.evaluate("document.body.dataset.variant ?? null"),
               "error": browser.evaluate("document.body.dataset.error ?? null"),
               "rows": browser.evaluate(PAGE_ROWS)}
        if screenshot is not None:
            browser.screenshot(screenshot)
    return out
