"""Keyless means this origin only, in a real browser: a page served by another loopback server
(another port: another origin) sends the attacks of issue 31 to a keyless server in headless
Chromium (a ``no-cors`` multipart upload and a ``no-cors`` JSON post; a browser sends no
cross-origin DELETE without CORS); neither changes it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from selenium.webdriver.support.ui import WebDriverWait

from tests.server.test_local_guard import keyless, sources  # noqa: F401 - fixture
from tests.server.test_page import browser, pytestmark  # noqa: F401 - fixture, skip

ATTACK = """<!doctype html><title>attack</title><script>
const target = "%s";
async function attack() {
  const form = new FormData();
  form.append("files", new Blob(["# Planted\\n\\nThe Skylark 2 weighs 90 kg, the attacker says."],
    {type: "text/markdown"}), "planted-upload.md");
  form.append("collection", "public");
  const results = [];
  for (const request of [
    fetch(target + "/v1/documents/files", {method: "POST", mode: "no-cors", body: form}),
    fetch(target + "/v1/documents", {method: "POST", mode: "no-cors",
      body: JSON.stringify({documents: [{source: "planted-json.md",
        text: "The Skylark 2 weighs 90 kg, the attacker says."}], collection: "public"})}),
  ]) {
    try { await request; results.push("sent"); } catch (e) { results.push("failed"); }
  }
  document.title = "done " + results.join(",");
}
attack();
</script>"""


@contextmanager
def page_of_another_origin(html: str) -> Iterator[str]:
    """A second loopback server (another port: another origin) serving one page."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/attack.html"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_origin_cannot_add_or_replace_a_document(browser, keyless):  # noqa: F811
    url, _ = keyless
    with page_of_another_origin(ATTACK % url) as attack_url:
        browser.get(attack_url)
        WebDriverWait(browser, 60).until(lambda d: d.title.startswith("done"))
        assert browser.title == "done sent,sent"  # the requests went out
    found = sources(url)
    assert "planted-upload.md" not in found
    assert "planted-json.md" not in found
    assert "hire.md" in found
