"""Run the benchmarks and write their sections into BENCHMARKS.md.

    python benchmarks/run.py            # every bench_*.py (what `make bench` runs)
    python benchmarks/run.py --slow     # also slow_*.py (about an hour: 100k-chunk scale, e5)
    python benchmarks/run.py NAME ...   # only these modules (e.g. bench_engine, huge_kb_scale:
                                        # 1M chunks, about 40 minutes)

Each module's ``run()`` returns a markdown section; it is written between markers, stamped with
the machine and date it was measured on, and sections of modules not run this time are kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE.parent / "BENCHMARKS.md"
HEADER = """# Benchmarks

Every figure below was measured by the command its section names, on the machine its section
names; `make bench` reruns every `bench_*.py` module (about half an hour on a 2-core machine) and
`python benchmarks/run.py --slow` the slow ones too. Ratios compare ragloop with the alternative
a user would pick, measured in the same run.
"""
SECTION = re.compile(r"<!-- section: (\w+) -->\n(.*?)<!-- end: \1 -->\n", re.DOTALL)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def load(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these modules")
    parser.add_argument("--slow", action="store_true", help="also run the slow_*.py modules")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    modules = sorted(HERE.glob("bench_*.py")) + (
        sorted(HERE.glob("slow_*.py")) if args.slow else []
    )
    if args.names:
        modules = [m for m in modules if m.stem in args.names] or [
            HERE / f"{n}.py" for n in args.names
        ]
    existing = dict(SECTION.findall(TARGET.read_text(encoding="utf-8"))) if TARGET.exists() else {}
    order = list(existing)
    for path in modules:
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        text = load(path).run().rstrip("\n")
        minutes = (time.perf_counter() - started) / 60
        stamp = f"_Measured on {machine()}, {dt.date.today().isoformat()} ({minutes:.1f} min)._"
        existing[path.stem] = f"{text}\n\n{stamp}\n"
        if path.stem not in order:
            order.append(path.stem)
        write(existing, order)  # after every module: a later failure loses nothing


def write(existing: dict[str, str], order: list[str]) -> None:
    body = "\n".join(
        f"<!-- section: {name} -->\n{existing[name]}<!-- end: {name} -->\n"
        for name in sorted(order, key=lambda n: (n.startswith("slow_"), n))
        if name in existing
    )
    TARGET.write_text(f"{HEADER}\n{body}", encoding="utf-8")
    print(f"wrote {TARGET}", file=sys.stderr)


if __name__ == "__main__":
    main()
