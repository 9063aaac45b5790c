"""A discrete-event model of `--fairness` (fairness.py), used to size it: twelve
workers, the same seeded arrivals, FIFO against the fair claim (the store served
least recently among those with work and under the in-flight cap). No database, no
processes, no noise: what the real benchmark would show on an idle, infinitely fast
machine, to tell a sizing that separates the two claims from one that cannot.

    python fairness_model.py [--seeds 40] [--load-s 10] [--overhead-ms 5] [--byname]

prints, for each claim, the worst (fair) or best (FIFO) steady and bulk ratio over
the seeds. Not part of a run or a test.
"""

import argparse
import random

import fairness


def run(arr, claim, workers=fairness.WORKERS, cap=4, poll_ms=10, overhead_ms=0):
    """The other stores' p95 (ms) of `arr` ([(t_ms, store, service_ms)]) under `claim`."""
    rng = random.Random(0)
    free = [0.0] * workers
    pending, busy, latency, last = [], [], {}, {}
    i = 0
    while len(latency) < len(arr):
        w = min(range(workers), key=free.__getitem__)
        t = free[w]
        while i < len(arr) and arr[i][0] <= t:
            pending.append((*arr[i], i))
            i += 1
        busy = [(end, s) for end, s in busy if end > t]
        if not pending:
            free[w] = max(t + poll_ms * rng.random(), arr[i][0] if i < len(arr) else t)
            continue
        if claim == "fifo":
            j = 0
        else:
            n = {}
            for _, s in busy:
                n[s] = n.get(s, 0) + 1
            open_ = [k for k, p in enumerate(pending) if n.get(p[1], 0) < cap]
            if not open_:
                free[w] = t + poll_ms
                continue
            if claim == "byname":   # the catalogue's claim-ignores-last-served: stores by name
                j = min(open_, key=lambda k: (pending[k][1], pending[k][3]))
            else:
                j = min(open_, key=lambda k: (last.get(pending[k][1], 0.0), pending[k][1], pending[k][3]))
        arrived, store, service, idx = pending.pop(j)
        last[store] = t
        end = t + service + overhead_ms
        busy.append((end, store))
        latency[idx] = end - arrived
        free[w] = end
    return fairness.p95([latency[k] for k, a in enumerate(arr) if a[1] != 0])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--load-s", type=float, default=fairness.LOAD_S)
    p.add_argument("--overhead-ms", type=float, default=5, help="a claim's own time, added to each service")
    p.add_argument("--byname", action="store_true", help="also the order by store name (claim-ignores-last-served)")
    a = p.parse_args()
    worst = {"yours": 0.0, "fifo": float("inf")}
    for seed in range(1, a.seeds + 1):
        for claim in ("yours", "fifo"):
            base, *loaded = (run(fairness.arrivals(seed, load, a.load_s), claim, overhead_ms=a.overhead_ms)
                             for load in fairness.LOADS)
            ratios = [x / base for x in loaded]
            worst[claim] = max(worst[claim], *ratios) if claim == "yours" else min(worst[claim], ratios[1])
    print(f"fair claim, worst steady or bulk ratio: {worst['yours']:.3f}; FIFO, best bulk ratio: {worst['fifo']:.2f}")
    if a.byname:
        bulk = sorted(run(fairness.arrivals(seed, fairness.LOADS[2], a.load_s), "byname", overhead_ms=a.overhead_ms)
                      / run(fairness.arrivals(seed, fairness.LOADS[0], a.load_s), "byname", overhead_ms=a.overhead_ms)
                      for seed in range(1, a.seeds + 1))
        print(f"stores by name (claim-ignores-last-served), bulk ratio: {bulk[0]:.2f} to {bulk[-1]:.2f}, "
              f"median {bulk[len(bulk) // 2]:.2f}; under 1.2x in {sum(b < 1.2 for b in bulk)} of {len(bulk)} seeds")


if __name__ == "__main__":
    main()
