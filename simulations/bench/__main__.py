"""Entry point: ``python -m simulations.bench NAME --out FILE.json [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time

from simulations.bench import BENCHMARKS
from simulations.bench.common import Report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench",
        description="Run a coded-fl benchmark; prints figures and writes JSON.",
    )
    parser.add_argument("name", choices=[*sorted(BENCHMARKS), "all"], help="which benchmark")
    parser.add_argument("--out", help="JSON file to write (for 'all': a directory)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, under 2 minutes on 2 cores (CI)"
    )
    parser.add_argument(
        "--parts",
        help="comma-separated parts to run, for benchmarks that have parts (stragglers: "
        "costs,des,flower; default all)",
    )
    args = parser.parse_args(argv)
    names = sorted(BENCHMARKS) if args.name == "all" else [args.name]
    failed = []
    for name in names:
        t0 = time.perf_counter()
        out = args.out if len(names) == 1 else (f"{args.out}/{name}.json" if args.out else None)
        report = Report(name=name, quick=args.quick, out=out)
        module = importlib.import_module(BENCHMARKS[name])
        extra = {}
        if args.parts is not None:
            if "parts" not in inspect.signature(module.run).parameters:
                parser.error(f"benchmark {name!r} has no parts: leave out --parts")
            extra["parts"] = args.parts
        try:
            module.run(report, quick=args.quick, **extra)
        except Exception as exc:  # report which benchmark broke, keep the others going
            print(f"[{name}] FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            if len(names) == 1:
                raise
            continue
        report.write(out)
        print(f"[{name}] done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
