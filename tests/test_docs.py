"""The examples in README.md and docs/ run as written."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
from pathlib import Path

import pytest

from ragloop.providers import override_allow_model_requests

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module", autouse=True)
def _demo_cache(tmp_path_factory):
    """The examples build the demo knowledge base: in a private folder, not the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAGLOOP_DEMO_DIR", str(tmp_path_factory.mktemp("demo-cache")))
        yield


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_python_blocks_run_in_order(path):
    namespace: dict[str, object] = {"__name__": f"doc_{path.stem}"}
    for block in python_blocks(path):
        # an example may talk to a model server it starts on 127.0.0.1 (README's llama.cpp one)
        with contextlib.redirect_stdout(io.StringIO()), override_allow_model_requests("loopback"):
            exec(compile(block, str(path), "exec", dont_inherit=True), namespace)


def test_readme_quick_start_is_the_demo_script_and_prints_what_the_readme_says():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    script = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert python_blocks(ROOT / "README.md")[0] == script
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", readme, re.DOTALL)
    assert shown is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    assert out.getvalue() == shown.group(1)


def test_readme_states_exactly_the_two_setup_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^make \w+", setup, re.MULTILINE)
    assert commands == ["make demo", "make test"]
