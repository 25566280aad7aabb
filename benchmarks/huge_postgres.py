"""bench_postgres.py at 1,000,000 chunks, behind its own name (both stores ingest a million
chunks: hours on 2 cores): `python benchmarks/run.py huge_postgres`."""

from __future__ import annotations

import bench_postgres


def run() -> str:
    return bench_postgres.run(1_000_000, command="python benchmarks/run.py huge_postgres")


if __name__ == "__main__":
    print(run())
