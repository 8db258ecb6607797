"""03_deferred_split.ipynb in a real JupyterLab, driven through a real Chromium.

Starts ``jupyter lab`` from this Python environment (so its ``python3`` kernel is this interpreter)
on 127.0.0.1 with a random token and a free port, serving a temporary copy of ``notebooks/``; opens
the notebook with Playwright in Debian's ``/usr/bin/chromium``, runs all cells, moves the live
``Stepper`` and checks that the counts it shows change; saves a screenshot under ``build/``; and
shuts the server (and its kernels) down. Skips when Chromium is missing, unless
``KIMI_VIZ_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets), in which case it fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright_or_skip

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "03_deferred_split.ipynb"
SCREENSHOT = ROOT / "build" / "jupyterlab_03_deferred_split.png"
SERVER_START_S = 90
RUN_ALL_S = 240

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(base: str, token: str, path: str, method: str = "GET") -> dict:
    """Return the JSON answer of one Jupyter server REST call."""
    request = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read()
    return json.loads(body) if body else {}


def wait_for_server(base: str, token: str, server: subprocess.Popen, log: Path) -> dict:
    """Return ``/api/status`` once the server answers it with our token."""
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            return api(base, token, "/api/status")
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    pytest.fail(
        f"jupyter lab did not answer /api/status within {SERVER_START_S} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


def stop_server(server: subprocess.Popen, base: str, token: str) -> None:
    """Shut the server down (REST, then SIGTERM, then SIGKILL) and end the kernels it started."""
    kernels = kernel_processes(server.pid) if Path("/proc").is_dir() else {}
    if server.poll() is None:
        try:
            api(base, token, "/api/shutdown", method="POST")
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
    for pid, command_line in kernels.items():  # normally gone with the server; never leave one behind
        try:
            still_ours = Path(f"/proc/{pid}/cmdline").read_bytes() == command_line
        except OSError:
            continue
        if still_ours:
            os.kill(pid, signal.SIGKILL)


SMALLEST_FONT_JS = """root => {
  let smallest = 1e9;
  for (const el of root.querySelectorAll('*')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.offsetParent === null) continue;
    smallest = Math.min(smallest, parseFloat(getComputedStyle(el).fontSize));
  }
  return smallest;
}"""


def prepare_lab_home(tmp_path: Path) -> tuple[Path, dict[str, str], list[str]]:
    """Return ``(notebook folder, environment, extra lab options)`` isolated under ``tmp_path``."""
    notebooks = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "build"))
    settings = tmp_path / "lab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))  # every cell in the DOM, so all can be checked
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false"}))  # no news prompt over the screenshot
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        MPLBACKEND="module://matplotlib_inline.backend_inline",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    options = [
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        options.append("--ServerApp.allow_root=True")
    return notebooks, env, options


def kernel_processes(server_pid: int) -> dict[int, bytes]:
    """Return ``{pid: raw command line}`` of the ipykernel processes the server started (Linux ``/proc``)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            command_line = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        parent = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
        if parent and int(parent.group(1)) == server_pid and b"ipykernel_launcher" in command_line.split(b"\0"):
            found[int(proc.name)] = command_line
    return found


def wait_for_idle_kernel(page) -> None:
    """Wait until the status bar shows the notebook's kernel as idle (accepting a kernel dialog if shown)."""
    idle = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle"))
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if idle.count():
            return
        dialog_accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
        if dialog_accept.count():
            dialog_accept.first.click()
        page.wait_for_timeout(500)
    pytest.fail(f"the notebook's kernel did not become idle within {SERVER_START_S} s")


def run_all_cells(page) -> None:
    """Run every cell through the Run menu and wait until each code cell has an execution count."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    code_cells = page.locator(".jp-Notebook .jp-CodeCell")
    total = code_cells.count()
    assert total >= 3, f"{NOTEBOOK} shows only {total} code cells"
    deadline = time.monotonic() + RUN_ALL_S
    prompts: list[str] = []
    while time.monotonic() < deadline:
        prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_inner_texts()
        if len(prompts) == total and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts):
            return
        page.wait_for_timeout(500)
    pytest.fail(f"cells still running after {RUN_ALL_S} s: prompts {prompts}")


def test_stepper_moves_in_jupyterlab_and_its_counts_change(tmp_path):
    sync_playwright = sync_playwright_or_skip()
    notebooks, env, options = prepare_lab_home(tmp_path)
    port, token = free_port(), secrets.token_hex(24)
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyter-lab.log"
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={notebooks}",
        "--ServerApp.open_browser=False",
        *options,
    ]
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            command, cwd=notebooks, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        status = wait_for_server(base, token, server, log)
        assert "started" in status
        with pytest.raises(urllib.error.HTTPError):  # the token is really required
            api(base, "not-the-token", "/api/contents")

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.set_default_timeout(90_000)  # a hang guard: a busy machine renders slowly, never wrongly
                page_errors: list[str] = []
                page.on("pageerror", lambda error: page_errors.append(str(error)))
                page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", timeout=120_000)
                page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
                wait_for_idle_kernel(page)

                run_all_cells(page)
                outputs = "\n".join(page.locator(".jp-Notebook .jp-OutputArea-output").all_inner_texts())
                assert "Traceback (most recent call last)" not in outputs, outputs[-4000:]

                # the live ipywidgets stepper (kernel-backed), not the static copy beside it
                live = page.locator(".kv-stepper.kv-live").first
                live.scroll_into_view_if_needed()
                live.wait_for(state="visible", timeout=90_000)
                stepper_slider = live.locator(".widget-slider.kv-slider").first
                counts = live.locator(".kv-counts").first
                position = live.locator(".kv-position").first
                counts.wait_for(state="visible", timeout=90_000)
                # it opens at the failing step, and its slider agrees with "Step k of n"
                assert position.inner_text().strip() == "Step 6 of 6"
                assert stepper_slider.locator(".widget-readout").inner_text().strip() == "6"
                fail = live.locator('.kv-counts td[data-key="check"]').first
                assert fail.inner_text() == "FAIL"
                assert fail.evaluate("e => getComputedStyle(e).color") == "rgb(179, 64, 0)"
                assert "FAIL" in live.locator(".kv-heading").first.inner_text()
                # the static copy of the same cell stepped aside for the live widget
                cell = live.locator("xpath=ancestor::div[contains(@class,'jp-OutputArea')][1]")
                page.wait_for_function(
                    "el => [...el.querySelectorAll('.kv-stepper.kv-static')].every(s => s.hidden)",
                    arg=cell.element_handle(),
                    timeout=90_000,
                )
                # readable, and the whole stepper fits a 1440x900 window with its axis visible
                assert live.evaluate(SMALLEST_FONT_JS) >= 10
                live.evaluate("el => el.scrollIntoView({block: 'start'})")
                box = live.bounding_box()
                assert box["height"] <= 900 and box["x"] + box["width"] <= 1440, box
                frame = live.locator("img.kv-frame, .kv-frame img").first
                assert frame.bounding_box()["width"] >= 760
                first_counts = counts.inner_text()

                live.locator(".kv-prev").first.click()
                page.wait_for_function(
                    "([el, before]) => el.innerText !== before",
                    arg=[counts.element_handle(), first_counts],
                    timeout=90_000,
                )
                after_prev = counts.inner_text()
                assert after_prev != first_counts
                assert position.inner_text().strip() == "Step 5 of 6"

                handle = stepper_slider.locator(".noUi-handle, [role='slider']").first
                handle.focus()
                page.keyboard.press("Home")
                page.wait_for_function(
                    "([el, before]) => el.innerText !== before",
                    arg=[counts.element_handle(), after_prev],
                    timeout=90_000,
                )
                assert counts.inner_text() != after_prev
                assert position.inner_text().strip() == "Step 1 of 6"
                root = live

                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                root.scroll_into_view_if_needed()
                page.screenshot(path=str(SCREENSHOT))
                assert SCREENSHOT.stat().st_size > 10_000
                assert not page_errors, page_errors
            finally:
                browser.close()
        kernels = api(base, token, "/api/kernels")
        assert len(kernels) == 1 and kernels[0]["name"] == "python3"
        if Path("/proc").is_dir():  # the notebook ran in this environment's interpreter
            interpreters = [os.fsdecode(c.split(b"\0")[0]) for c in kernel_processes(server.pid).values()]
            assert interpreters == [sys.executable]
    finally:
        stop_server(server, base, token)
    assert server.poll() is not None, "jupyter lab is still running"
