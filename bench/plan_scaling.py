"""How planning time grows with cluster size.

Plans the `multiworker` stack with 1, 64 and 512 workers through the real Pulumi program
under mocks (what `python -m trainstack plan` runs) and prints seconds per plan and the
ratio t(512)/t(64). Linear growth gives a ratio of 8; the target is a 512-worker plan
under 5 s and cost growing no worse than linearly, read with a 10% allowance for timing
noise (a ratio up to 8.8).

    python bench/plan_scaling.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainstack.cloud.planning import run_plan
from trainstack.stackmodel.stackfile import read_stack_config_map, stack_file_path

SIZES = (1, 64, 512)
LINEAR_NOISE_ALLOWANCE = 1.1


def time_plan(workers: int) -> tuple[float, int]:
    raw = copy.deepcopy(read_stack_config_map(stack_file_path("multiworker")))
    raw["trainstack:cluster"]["workers"]["count"] = workers
    start = time.perf_counter()
    plan = run_plan("multiworker", raw)
    return time.perf_counter() - start, len(plan.resources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="plans per size; the median is reported")
    args = parser.parse_args()
    time_plan(1)  # warm-up: imports, catalog load, template compilation
    medians: dict[int, float] = {}
    print(f"{'workers':>8} {'resources':>10} {'median s':>9} {'ms/worker':>10}")
    for size in SIZES:
        runs = [time_plan(size) for _ in range(args.repeat)]
        medians[size] = statistics.median(t for t, _ in runs)
        print(f"{size:>8} {runs[0][1]:>10} {medians[size]:>9.3f} {1000 * medians[size] / size:>10.2f}")
    ratio = medians[512] / medians[64]
    print(f"t(512)/t(64) = {ratio:.2f}  (linear = 8.00)")
    meets = medians[512] < 5 and ratio <= 8 * LINEAR_NOISE_ALLOWANCE
    print(
        f"t(512) = {medians[512]:.2f} s: {'meets' if meets else 'MISSES'} the target (t(512) < 5 s, ratio <= {8 * LINEAR_NOISE_ALLOWANCE:.1f})"
    )


if __name__ == "__main__":
    main()
