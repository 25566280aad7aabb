"""What the package says about itself is true: the licence file matches pyproject's, and the
README names every runtime dependency and extra pyproject declares, and nothing else."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_license_file_is_the_license_pyproject_declares():
    assert PROJECT["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text


def test_the_readme_names_exactly_the_runtime_dependencies_and_extras():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("Python 3.11 or newer.", 1)[1].split("\n\n", 1)[0]
    named = {_name(n) for n in re.findall(r"`([A-Za-z0-9_.\-]+)`", paragraph)}
    dependencies = {_name(r) for r in PROJECT["dependencies"]}
    extras = set(PROJECT["optional-dependencies"]) - {"dev"}
    assert named - {"ragloop"} == dependencies | extras


def test_the_pre_commit_hooks_are_valid_and_run_the_linters_of_make_lint():
    import subprocess
    import sys

    config = ROOT / ".pre-commit-config.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(config)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = config.read_text(encoding="utf-8")
    lint = (ROOT / "Makefile").read_text(encoding="utf-8").split("\nlint:", 1)[1]
    for tool in ("ruff check", "ruff format --check", "mypy"):
        assert tool in text, tool
        assert tool in lint, tool
