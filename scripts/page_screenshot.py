"""Take the README's screenshot of the graph page (docs/graph-page.png) from the demo data.

Loads the demo into a temporary data dir (`memoryd demo`), starts a daemon on a free port,
opens the page in Debian's headless chromium (as the browser tests do: chromium and
chromium-driver) and saves a PNG of the home view with one memory open. Run from the repo:

    .venv/bin/python scripts/page_screenshot.py [--entity NAME] [--out docs/graph-page.png]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if callable(check) and check():
                return
        except Exception:  # not ready yet
            pass
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "graph-page.png")
    parser.add_argument("--memory", default="Move the API from ECS to Kubernetes on EKS")
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-shot-") as tmp:
        home = Path(tmp) / "home"
        env = {
            **os.environ,
            "MEMORYD_DAEMON__AUTOSTART": "0",
            "MEMORYD_CONFIG": str(Path(tmp) / "no-config.toml"),
            "XDG_CONFIG_HOME": str(Path(tmp) / "config"),
        }
        memoryd = [sys.executable, "-m", "memoryd"]
        subprocess.run([*memoryd, "demo", "--home", str(home), "--json"], env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        port = free_port()
        daemon = subprocess.Popen(
            [*memoryd, "serve", "--home", str(home), "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait("the daemon", lambda: (home / "token").is_file())
            token = (home / "token").read_text().strip()
            base = f"http://127.0.0.1:{port}"
            auth = {"Authorization": f"Bearer {token}"}
            wait("the daemon", lambda: httpx.get(f"{base}/v1/health", headers=auth).is_success)
            shoot(base, token, args.memory, args.theme, args.out)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    sys.stdout.write(f"{args.out}\n")


def shoot(base: str, token: str, title: str, theme: str, out: Path) -> None:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1440,860",
                 "--force-device-scale-factor=1", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(f"{base}/#token={token}")
        driver.execute_script(
            "localStorage.setItem('memoryd.theme', arguments[0]);"
            " document.documentElement.dataset.theme = arguments[0];",
            theme,
        )
        wait("the home list", lambda: int(driver.execute_script(
            "return Number(document.getElementById('home').dataset.loaded || 0)")) > 3)  # fmt: skip
        rows = driver.find_elements(By.CSS_SELECTOR, "#home-list li[data-slug]")
        chosen = next(
            (r for r in rows if r.find_element(By.CLASS_NAME, "title").text == title), rows[0]
        )
        chosen.click()
        wait("the memory", lambda: driver.find_element(By.ID, "memory").is_displayed())
        wait("its history", lambda: driver.find_elements(By.CSS_SELECTOR, "#memory-timeline li"))
        driver.execute_script(
            "document.activeElement.blur(); document.getElementById('home').scrollTop = 0;"
        )
        time.sleep(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
