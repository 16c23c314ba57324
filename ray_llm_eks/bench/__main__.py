"""``python -m <package> SETTINGS OUT``: a benchmark run from a settings file, as the in-cluster Job runs it.

The settings are :class:`~.runner.BenchSettings` as JSON (``ray-llm-eks bench --emit-job`` writes
them); the outputs are the same as ``ray-llm-eks bench --out OUT``. Exit codes: 0 done, 2 the
settings or AIPerf's output cannot be used (the message says why).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runner import BenchError, BenchSettings, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rayllmeks_bench", description=__doc__)
    parser.add_argument("settings", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        settings = BenchSettings.from_json(json.loads(args.settings.read_text()))
        run(settings, args.out, progress=lambda line: print(f"[bench] {line}", flush=True))
    except (BenchError, OSError, ValueError, TypeError) as error:
        print(f"[bench] error: {error}", file=sys.stderr, flush=True)
        return 2
    print(f"[bench] done: {args.out}/summary.json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
