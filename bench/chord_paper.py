"""The Chord paper's simulations (Stoica et al., SIGCOMM 2001; ToN 2003) on our Chord core.

Every figure comes from ``overlay.sim.scenarios.chord.run_chord`` (the ``overlay sim``
scenario): a lookup is ok when it returns ``succ(key)`` over the live ring when it ends;
``hops`` counts the nodes a lookup asked, the owner included (a node that timed out
counts too). Three experiments, each printed as a table and written as CSV and PNG:

  pathlen   path length (SIGCOMM Fig. 10, ToN Fig. 11) for N = 2^3 .. 2^14: 10,000 lookups
            for random keys from random nodes per N, over 60 s (the paper looks up 100·N
            keys; capped here to keep within time). N <= 1024 form by joins one by one
            (0.1 s apart, 5 s stabilize period, lookups after 20 periods); N >= 2048 start
            from correct tables (oracle bootstrap, 30 s stabilize period: nothing changes,
            the tables stay correct) to save the joins' and maintenance's CPU time. N,
            mean, p1, p99 of the hops against ½·log2 N.
  failures  simultaneous failures (SIGCOMM Fig. 13, ToN Table/Fig. 13): a 1000-node ring
            (oracle bootstrap, stabilize every 30 s on average as in the paper, 10,000
            lookups spread from 40 s before the failure to the end), a fraction p = 0.1 ..
            0.5 of the nodes fails at once; failed-lookup fraction (and how many of the
            failed lookups gave up without an owner), and hops, for lookups issued in the
            first stabilize period after the failure, during the whole repair (until every
            survivor's successor and predecessor are right; checked every 30 s) and after
            it, and whether the ring is correct over the survivors at the end. Unlike the
            ToN experiment, stabilization goes on after the failure (the first stabilize
            period is the nearest reading of "before Chord corrects its tables"); a lookup
            counts as ok when it finds the key's current successor among the survivors, so
            the keys the failed nodes held are not counted lost (SIGCOMM Fig. 13 counts
            them, hence its failure fraction ≈ p, plotted for reference).
  churn     SIGCOMM Fig. 14 / ToN Fig. 14: 500 nodes (joined one by one), Poisson joins and
            Poisson failures, each at R = 0.01 .. 0.1 per second, stabilize every 30 s on
            average, one lookup per second for 3600 s of churn;
            failed-lookup fraction next to the paper's estimate k/100 for k = 30·R failures
            per stabilization period, and mean hops.

The runs go one after another in this process (``--jobs 1``, the default; ``--jobs J``
runs them in J worker processes instead). With one job the full run took 7 minutes on
a shared 2-core machine (pathlen 3, of which N = 16384 alone 1.5; failures 1; churn
3.4); ``--quick`` is a smoke run of small sizes (about 15 s): N <= 256, 200-node
failures (stabilize every 10 s), 100-node churn at R = 0.02 and 0.1 for 600 s.

Run: .venv/bin/python bench/chord_paper.py [--out runs/bench/chord] [--quick] [--jobs 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, where bench/scribe.py
# would hide the ``scribe`` package; the repository root goes first instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.sim.scenarios.chord import ChordScenario, run_chord  # noqa: E402

SECTIONS = ("pathlen", "failures", "churn")
#: Lookups after the warm-up in the path-length runs (seconds of simulated time).
PATHLEN_WINDOW = 60.0


# -- the runs ---------------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> list[tuple[str, Any, dict[str, Any]]]:
    """(section, x value, ChordScenario arguments) for every run."""
    runs: list[tuple[str, Any, dict[str, Any]]] = []
    q = args.quick
    if "pathlen" in args.only:
        exponents = range(3, 9) if q else range(3, 15)
        lookups = 1000 if q else 10_000
        for e in exponents:
            n = 2**e
            boot = "join" if n <= args.join_max else "oracle"
            kw: dict[str, Any] = dict(nodes=n, bootstrap=boot, lookups=lookups,
                                      stabilize_interval=5.0, seed=args.seed)
            if boot == "oracle":
                kw.update(warmup=10.0, stabilize_interval=30.0)
            ready = ChordScenario(**kw, duration=1e9).ready_at
            kw["duration"] = ready + PATHLEN_WINDOW + 10.0
            runs.append(("pathlen", n, kw))
    if "failures" in args.only:
        n = 200 if q else 1000
        stab = 10.0 if q else 30.0
        crash_at = 100.0
        for p in (0.1, 0.2, 0.3, 0.4, 0.5):
            runs.append(("failures", p, dict(
                nodes=n, bootstrap="oracle", stabilize_interval=stab, warmup=60.0,
                crash=p, crash_at=crash_at, duration=crash_at + (300.0 if q else 700.0),
                lookups=2000 if q else 10_000, seed=args.seed)))
    if "churn" in args.only:
        n = 100 if q else 500
        stab = 30.0
        window = 600.0 if q else 3600.0
        rates = (0.02, 0.1) if q else tuple(round(0.01 * k, 2) for k in range(1, 11))
        for rate in rates:
            kw = dict(nodes=n, bootstrap="join", stabilize_interval=stab, churn=rate,
                      lookups=int(window), seed=args.seed)
            ready = ChordScenario(**kw, duration=1e9).ready_at
            kw["duration"] = ready + window + 10.0
            runs.append(("churn", rate, kw))
    return runs


def cost(kw: dict[str, Any]) -> float:
    """A rough CPU estimate, to start the longest runs first."""
    return kw["nodes"] * kw["duration"] / kw["stabilize_interval"] + 20 * kw["lookups"]


def run_one(kw: dict[str, Any]) -> dict[str, Any]:
    return run_chord(ChordScenario(**kw))


def run_all(runs: list[tuple[str, Any, dict[str, Any]]],
            jobs: int) -> dict[tuple[str, Any], dict[str, Any]]:
    results: dict[tuple[str, Any], dict[str, Any]] = {}
    started = time.perf_counter()

    def done(section: str, x: Any, summary: dict[str, Any]) -> None:
        results[(section, x)] = summary
        print(f"  [{time.perf_counter() - started:6.0f} s] {section} {x}: "
              f"{summary['wall_s']:.0f} s", file=sys.stderr, flush=True)

    if jobs <= 1:
        for section, x, kw in runs:
            done(section, x, run_one(kw))
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, kw): (section, x)
                   for section, x, kw in sorted(runs, key=lambda r: -cost(r[2]))}
        for future in as_completed(futures):
            done(*futures[future], future.result())
    return results


# -- tables -----------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def show(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    cols = list(rows[0])
    cells = [[fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def failed(stats: dict[str, Any]) -> float | None:
    return None if stats["ok_rate"] is None else round(1.0 - stats["ok_rate"], 4)


def pathlen_rows(runs: list[tuple[str, Any, dict[str, Any]]],
                 results: dict[tuple[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for section, n, kw in runs:
        if section != "pathlen":
            continue
        s = results[(section, n)]
        half = 0.5 * math.log2(n)
        rows.append({"N": n, "bootstrap": kw["bootstrap"], "lookups": s["lookups"],
                     "ok_rate": s["ok_rate"], "mean": s["hops_mean"], "p1": s["hops_p1"],
                     "p99": s["hops_p99"], "half_log2_N": half,
                     "mean/half_log2_N": round(s["hops_mean"] / half, 3),
                     "log2_N+1": round(math.log2(n) + 1, 2), "wall_s": s["wall_s"]})
    return rows


def failure_rows(runs: list[tuple[str, Any, dict[str, Any]]],
                 results: dict[tuple[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for section, p, kw in runs:
        if section != "failures":
            continue
        s = results[(section, p)]
        first, during, after = s["first_period"], s["during_repair"], s["after_repair"]
        rows.append({
            "p": p, "N": kw["nodes"], "crashed": s["crashed"], "repair_s": s["repair_s"],
            "ring_ok_end": s["repair_s"] is not None and s["ring_errors"] == 0,
            "first_n": first["lookups"], "first_failed": failed(first),
            "first_no_owner": first["no_owner"], "first_hops": first["hops_mean"],
            "first_p99": first["hops_p99"],
            "repair_n": during["lookups"], "repair_failed": failed(during),
            "repair_no_owner": during["no_owner"], "repair_hops": during["hops_mean"],
            "repair_p99": during["hops_p99"],
            "after_n": after["lookups"], "after_failed": failed(after),
            "after_hops": after["hops_mean"], "after_p99": after["hops_p99"],
            "before_hops": s["before_crash"]["hops_mean"], "wall_s": s["wall_s"]})
    return rows


def churn_rows(runs: list[tuple[str, Any, dict[str, Any]]],
               results: dict[tuple[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for section, rate, kw in runs:
        if section != "churn":
            continue
        s = results[(section, rate)]
        k = rate * kw["stabilize_interval"]
        rows.append({"rate": rate, "N": kw["nodes"], "k_per_period": round(k, 2),
                     "paper_est": round(k / 100, 4), "lookups": s["lookups"],
                     "failed": failed(s), "hops_mean": s["hops_mean"],
                     "hops_p99": s["hops_p99"], "joins": s["churn_joins"],
                     "failures": s["churn_failures"], "live_end": s["live_nodes"],
                     "wall_s": s["wall_s"]})
    return rows


# -- plots ------------------------------------------------------------------------------------


def plot_pathlen(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    ns = [r["N"] for r in rows]
    means = [r["mean"] for r in rows]
    lo = [r["mean"] - r["p1"] for r in rows]
    hi = [r["p99"] - r["mean"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.errorbar(ns, means, yerr=[lo, hi], fmt="o-", capsize=3, label="mean hops (p1-p99)")
    ax.plot(ns, [r["half_log2_N"] for r in rows], "k--", label="½·log2 N")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of nodes N")
    ax.set_ylabel("path length (hops)")
    ax.set_title("Chord path length (paper Fig. 10)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_failures(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    ps = [r["p"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for key, label in (("first", "first stabilize period"), ("repair", "during repair"),
                       ("after", "after repair")):
        left.plot(ps, [r[f"{key}_failed"] for r in rows], "o-", label=label)
        right.plot(ps, [r[f"{key}_hops"] for r in rows], "o-", label=label)
    left.plot(ps, ps, "k:", label="p (keys lost, paper Fig. 13)")
    left.set_xlabel("fraction of nodes failed p")
    left.set_ylabel("failed-lookup fraction")
    right.set_xlabel("fraction of nodes failed p")
    right.set_ylabel("mean hops (time-outs included)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Simultaneous failures, N = {rows[0]['N']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_churn(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    rates = [r["rate"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    left.plot(rates, [r["failed"] for r in rows], "o-", label="simulated")
    left.plot(rates, [r["paper_est"] for r in rows], "k--", label="paper estimate k/100")
    left.set_xlabel("joins and failures per second (each)")
    left.set_ylabel("failed-lookup fraction")
    right.plot(rates, [r["hops_mean"] for r in rows], "o-")
    right.set_xlabel("joins and failures per second (each)")
    right.set_ylabel("mean hops")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend()
    fig.suptitle(f"Churn, N = {rows[0]['N']}, stabilize every 30 s (paper Fig. 14)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench/chord"))
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: N <= 256, 200-node failures, 100-node churn")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes (default 1: every run in this process)")
    parser.add_argument("--join-max", type=int, default=1024,
                        help="largest path-length N formed by joins; larger N use the "
                        "oracle bootstrap (default 1024)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.only = [s for s in args.only.split(",") if s]
    if unknown := set(args.only) - set(SECTIONS):
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")

    import matplotlib

    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = plan(args)
    results = run_all(runs, args.jobs)
    with (args.out / "summaries.jsonl").open("w") as f:
        for section, x, kw in runs:
            f.write(json.dumps({"section": section, "x": x, "scenario": kw,
                                "summary": results[(section, x)]}) + "\n")

    builders = {"pathlen": (pathlen_rows, plot_pathlen,
                            "Path length (hops; SIGCOMM Fig. 10)"),
                "failures": (failure_rows, plot_failures,
                             "Simultaneous failures (failed = 1 - ok_rate; hops include "
                             "time-outs)"),
                "churn": (churn_rows, plot_churn,
                          "Churn (paper estimate k/100, k = rate x 30 s failures per "
                          "stabilization period)")}
    for section in args.only:
        rows_of, plot, title = builders[section]
        rows = rows_of(runs, results)
        show(title, rows)
        write_csv(args.out / f"{section}.csv", rows)
        plot(rows, args.out / f"{section}.png")
    print(f"\nwrote {args.out}/{{{','.join(args.only)}}}.csv/.png and summaries.jsonl "
          f"in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
