"""bench_kb_scale.py at 1,000,000 chunks, behind its own name (about 40 minutes here, most of it
ingesting and building the bm25s reference): `python benchmarks/run.py huge_kb_scale`."""

from __future__ import annotations

import bench_kb_scale


def run() -> str:
    return bench_kb_scale.run(1_000_000, command="python benchmarks/run.py huge_kb_scale")


if __name__ == "__main__":
    print(run())
