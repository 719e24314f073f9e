"""A headless Chromium driven over the Chrome DevTools Protocol (CDP), for tests that use a real web UI.

No new dependency and nothing downloaded: Debian's ``/usr/bin/chromium`` (``.ci/run`` installs it) and the
``websockets`` client Prefect already depends on. Clicks and typing are real input events at the element's
position (``Input.dispatchMouseEvent`` / ``Input.insertText``), not ``element.click()`` from script, so a
control that a user could not reach (hidden, covered, outside the dialog) is not reached here either."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

CHROMIUM = Path("/usr/bin/chromium")


class BrowserError(AssertionError):
    """What the page showed when an expected element did not appear (a test failure, not an error)."""


class Browser:
    """One headless Chromium with its own profile folder and one page; use as a context manager."""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self._proc = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._ids = itertools.count(1)
        self.events: list[dict] = []  # CDP events that arrived while a command waited (console, exceptions, …)
        try:
            deadline = time.monotonic() + 60
            while len(lines := (port_file.read_text().split() if port_file.exists() else [])) < 2:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise BrowserError(f"chromium did not open its DevTools port (exit {self._proc.poll()})")
                time.sleep(0.1)
            targets = httpx.get(f"http://127.0.0.1:{lines[0]}/json/list", timeout=10).json()
            page = next(t for t in targets if t["type"] == "page")
            self._ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        except BaseException:
            self._kill()
            raise
        self.call("Page.enable")

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self._kill()

    def _kill(self) -> None:
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()

    # -- protocol -------------------------------------------------------------------------------

    def call(self, method: str, **params: Any) -> dict:
        """Send one CDP command and return its result (events that arrive meanwhile are kept in ``events``)."""
        i = next(self._ids)
        self._ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv(timeout=60))
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            if "method" in msg:
                self.events.append(msg)

    def js(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression evaluated in the page."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    # -- what a user does -----------------------------------------------------------------------

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def console_errors(self) -> list[str]:
        """What the page reported as an error so far: uncaught exceptions, console.error calls and error log
        entries (a failed load among them). Needs ``Runtime.enable`` and ``Log.enable`` before the page opened."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def text(self) -> str:
        return self.js("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, element: str, what: str, timeout: float = 60) -> None:
        """Wait until the JavaScript expression ``element`` yields an element that is on screen and that no running
        animation moves (a dialog that is still zooming in moves its controls; a spinner elsewhere does not)."""
        deadline = time.monotonic() + timeout
        probe = (f"(() => {{ const e = {element}; if (!e) return false; const r = e.getBoundingClientRect(); "
                 "return r.width > 0 && r.height > 0 && document.getAnimations().every(a => a.playState !== 'running' "
                 "|| !(a.effect && a.effect.target && a.effect.target.contains(e))); })()")
        while not self.js(probe):
            if time.monotonic() > deadline:
                raise BrowserError(f"{what} did not appear within {timeout} s at {self.js('location.href')}; "
                                   f"the page shows:\n{self.text()[-3000:]}")
            time.sleep(0.2)

    def wait_until(self, condition: str, what: str, timeout: float = 30) -> None:
        """Wait until the JavaScript expression ``condition`` is true (a framework re-renders after an event)."""
        deadline = time.monotonic() + timeout
        while not self.js(condition):
            if time.monotonic() > deadline:
                raise BrowserError(f"{what}: not so within {timeout} s; the page shows:\n{self.text()[-3000:]}")
            time.sleep(0.1)

    def click(self, element: str, what: str, timeout: float = 60) -> None:
        """A left click (move, press, release) at the centre of the element, scrolled into view first."""
        self.wait_for(element, what, timeout)
        self.js(f"({element}).scrollIntoView({{block: 'center'}})")
        self.wait_for(element, what, timeout)
        x, y = self.js(f"(() => {{ const r = ({element}).getBoundingClientRect(); "
                       "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type_into(self, element: str, text: str, what: str) -> None:
        """Click into a text field and type ``text`` as keyboard input would insert it."""
        self.click(element, what)
        self.call("Input.insertText", text=text)


def by_text(selector: str, text: str) -> str:
    """JavaScript: the first element matching ``selector`` whose trimmed text is ``text``."""
    return (f"[...document.querySelectorAll({json.dumps(selector)})]"
            f".find(e => e.textContent.trim() === {json.dumps(text)})")


def labelled_control(scope: str, label: str) -> str:
    """JavaScript: the form control (switch, text field) of the field labelled ``label`` (an ``(Optional)``
    mark ignored) inside ``scope``: the nearest one in the label's enclosing field."""
    controls = "[role=switch], textarea, input:not([type=hidden]):not([type=checkbox])"
    return (f"(() => {{ const l = [...document.querySelectorAll({json.dumps(scope + ' label')})]"
            f".find(l => l.textContent.replace('(Optional)', '').trim() === {json.dumps(label)}); "
            f"let e = l; while (e && !e.querySelector({json.dumps(controls)})) e = e.parentElement; "
            f"return e ? e.querySelector({json.dumps(controls)}) : null; }})()")
