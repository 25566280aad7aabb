"""Start-up: how long ``import ragloop`` and ``ragloop --help`` take as whole processes, beside
what any Python program pays (the bare interpreter) and what the alternatives import (pydantic,
ragsnag's only dependency; click, what a click command line imports before anything).

Each command runs as its own process, RUNS times after a warm-up, the commands taking turns so
that a machine whose speed drifts slows them alike; the figures are medians of the wall-clock
time and of the process's CPU time (user + system, from the operating system's accounting of
the finished child), the ratio is to the bare interpreter in the same run.

    python benchmarks/run.py bench_startup
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 9
BIN = Path(sys.executable).parent
CLI = str(BIN / "ragloop")
COMMANDS = [
    ("the bare interpreter: `python -c pass`", [sys.executable, "-c", "pass"]),
    ("`python -c 'import click'`", [sys.executable, "-c", "import click"]),
    ("`python -c 'import pydantic'` (ragsnag's import)", [sys.executable, "-c", "import pydantic"]),
    ("`python -c 'import ragloop'`", [sys.executable, "-c", "import ragloop"]),
    ("`ragloop --help`", [CLI, "--help"]),
    ("`ragloop --version`", [CLI, "--version"]),
    (
        "`python -c 'from ragloop import RAGLoop'` (a first use)",
        [sys.executable, "-c", "from ragloop import RAGLoop"],
    ),
    ("`ragloop ask --help` (a command's own help loads that command)", [CLI, "ask", "--help"]),
]


def _once(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``command`` as a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(runs: int = RUNS) -> list[tuple[str, float, float]]:
    """(label, median wall ms, median CPU ms) per command, the commands taking turns."""
    for _, command in COMMANDS:  # warm-up: files cached, bytecode compiled
        _once(command)
    walls: list[list[float]] = [[] for _ in COMMANDS]
    cpus: list[list[float]] = [[] for _ in COMMANDS]
    for _ in range(runs):
        for i, (_, command) in enumerate(COMMANDS):
            wall, cpu = _once(command)
            walls[i].append(wall * 1000.0)
            cpus[i].append(cpu * 1000.0)
    return [
        (label, statistics.median(w), statistics.median(c))
        for (label, _), w, c in zip(COMMANDS, walls, cpus, strict=True)
    ]


def run() -> str:
    load = os.getloadavg()[0]
    rows = measure()
    _, floor_wall, floor_cpu = rows[0]
    lines = [
        "## Start-up: `import ragloop` and `ragloop --help`",
        "",
        f"Command: `make bench` (benchmarks/bench_startup.py). Whole processes, {RUNS} runs each "
        "after a warm-up, taking turns; medians. CPU is user + system time of the process. "
        "`import ragloop` loads no module until a name is used, and `ragloop --help` lists the "
        "commands from their one-line summaries without importing them.",
        "",
        "| command | wall ms | CPU ms | CPU / bare interpreter |",
        "|---|---:|---:|---:|",
    ]
    for label, wall, cpu in rows:
        lines.append(f"| {label} | {wall:.0f} | {cpu:.0f} | {cpu / floor_cpu:.1f}x |")
    lines += [
        "",
        f"Measured with a load average of {load:.1f} on the machine (other work running: wall "
        "times stretch, CPU times much less). "
        f"The bare interpreter itself takes {floor_wall:.0f} ms of wall time here. Before "
        "names were imported on first use, `import ragloop` imported every module of the "
        "package (numpy, httpx, psycopg, rich, PyStemmer, pydantic, tenacity, click): about "
        "0.7 s of CPU, and `ragloop --help` imported every command: about 0.8 s.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
