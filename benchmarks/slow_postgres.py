"""bench_postgres.py at 100k chunks (about 19 minutes here, most of it ingesting into both
stores): `python benchmarks/run.py --slow`."""

from __future__ import annotations

import bench_postgres


def run() -> str:
    return bench_postgres.run(100_000, command="python benchmarks/run.py --slow")


if __name__ == "__main__":
    print(run())
