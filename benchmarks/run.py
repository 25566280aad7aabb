"""Run every benchmark in this folder and write BENCHMARKS.md. Usage: make bench"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def main() -> None:
    sections = []
    for path in sorted(HERE.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec
        assert spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"running {path.name} ...", file=sys.stderr)
        sections.append(module.run())
    header = (
        "# Benchmarks\n\n"
        "Written by `make bench` (`python benchmarks/run.py`); every figure below comes from one "
        "run of that command.\n\n"
        f"- Machine: {machine()}\n"
        f"- Date: {dt.date.today().isoformat()}\n"
    )
    text = header + "\n" + "\n\n".join(sections) + "\n"
    (ROOT / "BENCHMARKS.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
