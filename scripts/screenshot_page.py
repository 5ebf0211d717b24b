"""Take the README's picture of the chat page: `mlxd serve` on the demo model, one question
asked in headless Chromium (Debian's), the page saved as docs/images/chat-page.png.

    python scripts/screenshot_page.py [OUT.png]
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images/chat-page.png")
QUESTION = "What is the capital of France? Answer in one sentence."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"mlxd serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("mlxd serve did not come up")


def main() -> None:
    from playwright.sync_api import sync_playwright

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlxd = Path(sys.executable).with_name("mlxd")
    proc = subprocess.Popen([str(mlxd), "serve", "--port", str(port)], env=dict(os.environ))
    try:
        wait_ready(url, proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            page.set_default_timeout(300_000)
            page.goto(url + "/")
            page.wait_for_selector("#model option", state="attached")
            page.fill("#prompt", QUESTION)
            page.click("#send")
            page.wait_for_selector("body[data-state='idle']", state="attached")
            OUT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(OUT))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(OUT)


if __name__ == "__main__":
    main()
