"""python -m bench [SUITE ...]: run benchmark suites and write one artifact per suite to bench/results/.

Then `python -m bench.render` renders docs/BENCHMARKS.md and the README summary from the artifacts.
"""
import argparse
import sys

from . import env, procs, reference, runner, suites, wsload


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("suites", nargs="*", help=f"suites to run (default: all): {', '.join(suites.SUITES)}")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per timed wrk run (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds, at least 3 for an artifact")
    ap.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per arm (default 2)")
    ap.add_argument("--cooldown", type=float, default=3.0, help="seconds between rows (default 3)")
    ap.add_argument("--attack-sample", type=float, default=3.0, help="attack suite: seconds over which the server's "
                    "CPU is read with the attackers alone, before each measurement (default 3)")
    ap.add_argument("--nice", type=int, default=0, help="niceness for servers and wrk (recorded; default 0)")
    ap.add_argument("--bare-request", action="store_true",
                    help="send wrk's Host-only request instead of the twelve-header browser request")
    ap.add_argument("--arms", help="comma-separated arm names to keep (default: all); rows left with none are not run")
    ap.add_argument("--rows", help="comma-separated row ids to keep (default: all), e.g. wsgi-idle5000; a smoke "
                    "run of one row, its artifact marked as a subset")
    ap.add_argument("--results", default=str(env.RESULTS_DIR), help="artifact directory")
    ap.add_argument("--no-install", action="store_true", help="do not create the venv or apt-get install")
    ap.add_argument("--note", default="", help="free text stored in the artifact")
    ap.add_argument("--ref-build", help="a `pip install --target` directory of an earlier m0serve: every m0serve arm "
                    "also runs on it, in the same rounds (bench/reference.py); the artifact goes to "
                    "bench/results/ab unless --results says otherwise")
    ap.add_argument("--ref-name", help="what the reference build is (its commit), with --ref-build")
    args = ap.parse_args(argv)
    if bool(args.ref_build) != bool(args.ref_name):
        ap.error("--ref-build and --ref-name go together")
    if args.ref_build:
        try:
            args.ref_build = reference.check_reference(args.ref_build, env.m0serve_python())
        except reference.ReferenceError as e:
            ap.error(str(e))
        if args.results == str(env.RESULTS_DIR):
            args.results = str(env.RESULTS_DIR / "ab")

    names = args.suites or list(suites.SUITES)
    unknown = [n for n in names if n not in suites.SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {unknown}; choose from {list(suites.SUITES)}")
    if args.rounds < 3:
        env.log(f"--rounds {args.rounds} < 3: the artifact will be marked as not publishable")

    procs.install_signal_handlers()
    # The tls suite holds thousands of connections: the servers (started from here) and the clients need
    # the file limit raised to its hard limit.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not args.no_install:
        env.ensure_system_packages()
        env.ensure_bench_venv()
        if "threads" in names:
            env.ensure_ft_granian()
    env.build_floor()
    if "websocket" in names:
        wsload.build()
    settings = runner.Settings(duration_s=args.duration, rounds=args.rounds, warmup_s=args.warmup,
                               cooldown_s=args.cooldown, nice=args.nice, attack_sample_s=args.attack_sample,
                               bare_request=args.bare_request)
    keep = set(args.arms.split(",")) if args.arms else None
    keep_rows = set(args.rows.split(",")) if args.rows else None
    status = 0
    for name in names:
        rows = suites.SUITES[name]()
        if keep:
            for row in rows:
                row.arms = [a for a in row.arms if a.name in keep]
            rows = [row for row in rows if row.arms]  # a row none of whose arms is kept is not run
        if keep_rows:
            rows = [row for row in rows if row.id in keep_rows]
        if args.ref_build:
            rows = reference.with_reference_arms(rows, args.ref_build, args.ref_name)
        env.log(f"suite {name}: {len(rows)} row(s)")
        artifact = runner.run_suite(name, rows, settings, note=args.note)
        if args.ref_build:
            artifact["provenance"]["reference"] = {"name": args.ref_name, "path": str(args.ref_build)}
        suites.validate(artifact)
        if args.rounds < 3:
            artifact["valid"] = False
            artifact["invalid_reasons"].append(f"only {args.rounds} round(s)")
        if keep_rows:
            artifact["valid"] = False
            artifact["invalid_reasons"].append(f"only the row(s) {sorted(keep_rows)}")
        path = runner.write_artifact(artifact, args.results)
        env.log(f"suite {name}: wrote {path}" + ("" if artifact["valid"] else
                                                  f" (INVALID: {'; '.join(artifact['invalid_reasons'])})"))
        for reason in artifact["invalid_reasons"]:
            env.log(f"  {reason}")
        if not artifact["valid"]:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
