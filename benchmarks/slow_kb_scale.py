"""bench_kb_scale.py at 100k chunks (about 8 minutes here): `python benchmarks/run.py --slow`.
1M chunks: huge_kb_scale.py."""

from __future__ import annotations

import bench_kb_scale


def run() -> str:
    return bench_kb_scale.run(
        100_000, command="python benchmarks/run.py --slow", real_vectors=5_000
    )


if __name__ == "__main__":
    print(run())
