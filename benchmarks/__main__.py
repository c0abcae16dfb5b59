"""``python -m benchmarks [--full | --smoke] [--only NAME ...] [--out DIR] [--keep]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.runner import SCENARIOS, run_benchmarks
from benchmarks.sizes import FULL, QUICK, SMOKE

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="Sonde's benchmark harness (127.0.0.1 only)."
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="the full set (long: about 7-15 minutes)")
    group.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--only", nargs="+", choices=list(SCENARIOS), help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the JSON and table go")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, data)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sizes = FULL if args.full else SMOKE if args.smoke else QUICK
    run = run_benchmarks(sizes, args.only or list(SCENARIOS), args.out, keep=args.keep)
    failed = [name for name, scenario in run["scenarios"].items() if scenario["status"] == "error"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
