"""Entry point: ``python -m simulations.bench NAME --out FILE.json [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from simulations.bench import BENCHMARKS, QUICK_SECONDS
from simulations.bench.common import Report


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _in_children(names: list[str], args: argparse.Namespace) -> list[str]:
    """Each benchmark in a child process, ``args.jobs`` at a time, the longest first; a child's
    output is printed whole when it ends (no interleaving). Returns the names that failed."""
    order = sorted(names, key=lambda n: -QUICK_SECONDS.get(n, 0))
    failed: list[str] = []

    def one(name: str, logs: Path) -> None:
        cmd = [sys.executable, "-m", "simulations.bench", name]
        cmd += ["--quick"] if args.quick else []
        cmd += ["--out", f"{args.out}/{name}.json"] if args.out else []
        cmd += ["--parts", args.parts] if args.parts is not None else []
        t0 = time.perf_counter()
        log = logs / f"{name}.log"
        with log.open("w") as fh:
            rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy())
        text = log.read_text(errors="replace")
        status = "done" if rc == 0 else f"FAILED (exit status {rc})"
        print(f"{text}[{name}] {status} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(name)

    with (
        tempfile.TemporaryDirectory(prefix="cfl-bench-") as tmp,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        list(pool.map(lambda n: one(n, Path(tmp)), order))
    return failed


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
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="for 'all': run this many benchmarks at once, each in its own process (CI: 2)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    names = sorted(BENCHMARKS) if args.name == "all" else [args.name]
    if len(names) > 1 and args.jobs > 1:
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        failed = _in_children(names, args)
        if failed:
            print(f"benchmarks that failed: {', '.join(sorted(failed))}", file=sys.stderr)
        return 1 if failed else 0
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
    # SIGTERM (a CI timeout, kill PID) unwinds like Ctrl-C, so a benchmark's finally blocks
    # tear down what it started (deployment beds: SuperLink, SuperNodes, their ClientApps)
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
