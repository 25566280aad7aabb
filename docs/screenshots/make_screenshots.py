"""The screenshot of the web page in README.md and docs/serving.md, made from a real run.

It starts ``ragloop serve`` (the demo knowledge base, or ``--kb FILE``) on a free loopback port,
asks its questions on the page in headless Chromium (selenium, a dev dependency; Debian's
chromium and chromium-driver), each after the first as a follow-up in the same conversation,
and saves the whole page as a PNG once the last answer is in::

    python docs/screenshots/make_screenshots.py                       # docs/images/page.png
    python docs/screenshots/make_screenshots.py --kb pydocs.sqlite --name page-pydocs.png \\
        --ask "How do I remove common leading whitespace from every line?" \\
        --ask "And how do I add a prefix to each line?"
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

DEMO_QUESTIONS = [
    "How much does the Skylark 2 weigh?",
    "And what warranty does it come with?",  # a follow-up, read with the question before it
    "Can I hire a kayak?",  # the documents do not say: not sure, the closest passages
]
WIDTH = 1280


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(kb: str | None, port: int) -> subprocess.Popen[bytes]:
    source = ["--kb", kb] if kb else ["--demo"]
    command = [sys.executable, "-m", "ragloop", "serve", *source, "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_SERVER")}
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # the demo knowledge base is built on first use
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"ragloop serve ended with status {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit("ragloop serve did not start")


def chromium() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    flags += ["--hide-scrollbars", f"--window-size={WIDTH},900", "--force-device-scale-factor=1"]
    for flag in flags:
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def ask_all(browser: webdriver.Chrome, url: str, questions: list[str]) -> None:
    browser.get(url + "/")
    browser.execute_script("localStorage.clear()")
    browser.get(url + "/")
    for n, question in enumerate(questions, 1):
        box = browser.find_element(By.ID, "question")
        box.send_keys(question)
        browser.find_element(By.ID, "ask").click()
        WebDriverWait(browser, 600).until(lambda b, n=n: answered(b, n))


def answered(browser: webdriver.Chrome, n: int) -> bool:
    turns = browser.find_elements(By.CSS_SELECTOR, "#thread .turn")
    return len(turns) >= n and turns[n - 1].get_attribute("data-state") != "working"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", help="the knowledge base to serve (default: the demo's)")
    parser.add_argument("--ask", action="append", help="a question (repeat: a conversation)")
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "images"))
    parser.add_argument("--name", default="page.png")
    args = parser.parse_args()
    questions = args.ask or DEMO_QUESTIONS
    port = free_port()
    server = serve(args.kb, port)
    browser = chromium()
    try:
        ask_all(browser, f"http://127.0.0.1:{port}", questions)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(WIDTH, int(height) + 20)
        browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        out = Path(args.out) / args.name
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out))
        print(f"wrote {out}")
    finally:
        browser.quit()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
