#!/usr/bin/env python3
"""Where one training step's GPU time goes, from an Nsight Compute CSV.

Reads `ncu --csv --metrics gpu__time_duration.sum` output, cuts it into steps
at each launch of the optimizer kernel (a name matching --step_marker), and
prints, for the last whole step: every kernel name's total time, launch count
and share, grouped into families, and the step's summed kernel time. Compare
that sum with the step's wall time (measured without the profiler) to see how
long the GPU sat idle.
  python3 kernel_time_table.py profile.csv --step_marker adam [--wall_ms 35.2]
"""
import argparse
import collections
import csv
import re
import sys

FAMILIES = [  # first match wins
    ("optimizer", r"(?i)adam|sum_squares|sum_partials|multi_tensor"),
    ("attention", r"(?i)flash|fmha|attention|sdpa|cutlass.*(fwd|bwd)"),
    ("matmul", r"(?i)gemm|cublas|sm90_xmma|nvjet|cutlass|matmul|decode_linear"),
    ("layer norm / RMSNorm", r"(?i)layer_norm|layernorm|rms_norm"),
    ("bias+gelu / gelu", r"(?i)gelu"),
    ("cross-entropy / softmax", r"(?i)cross_entropy|softmax|log_softmax|nll"),
    ("embedding", r"(?i)embedding|index|indices|radix|sort|scan|unique"),
    ("reduction (bias grads, norms)", r"(?i)reduce"),
    ("elementwise / copies", r"(?i)elementwise|vectorized|copy|cat|fill|unrolled|swiglu|rotary"),
    ("triton (torch.compile)", r"(?i)triton"),
]


def family(name):
    for label, pattern in FAMILIES:
        if re.search(pattern, name):
            return label
    return "other"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--step_marker", default="adam")
    parser.add_argument("--wall_ms", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    launches = []  # (id, name, ns)
    with open(args.csv, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        ns = value * {"ns": 1, "nsecond": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, 1)
        launches.append((int(row["ID"]), row["Kernel Name"], ns))
    launches.sort()
    marker = re.compile(args.step_marker, re.IGNORECASE)
    # A step ends with its optimizer launch(es); consecutive marker launches
    # belong to the same step.
    ends = [i for i, (_, name, _) in enumerate(launches)
            if marker.search(name) and (i + 1 == len(launches) or not marker.search(launches[i + 1][1]))]
    if len(ends) < 2:
        sys.exit(f"{args.csv}: fewer than two optimizer launches matching {args.step_marker!r} "
                 f"among {len(launches)} kernels; profile more launches")
    step = launches[ends[-2] + 1: ends[-1] + 1]
    total = sum(ns for _, _, ns in step)
    by_name = collections.defaultdict(lambda: [0.0, 0])
    by_family = collections.defaultdict(lambda: [0.0, 0])
    for _, name, ns in step:
        short = re.sub(r"\(.*", "", name)[:110]
        by_name[short][0] += ns
        by_name[short][1] += 1
        by_family[family(name)][0] += ns
        by_family[family(name)][1] += 1
    print(f"one step: {len(step)} kernel launches, {total / 1e6:.3f} ms of kernel time", end="")
    if args.wall_ms > 0 and total / 1e6 > args.wall_ms:
        # Each kernel timed alone, caches emptied: kernels that overlap in
        # the real run (dependent launch) or find warm caches sum to more.
        print(f"; wall {args.wall_ms:.3f} ms, less than the kernels timed alone")
    elif args.wall_ms > 0:
        print(f"; wall {args.wall_ms:.3f} ms, so the GPU idles {100 * (1 - total / 1e6 / args.wall_ms):.1f}%")
    else:
        print()
    print("\n| family | ms | launches | share |\n|---|---|---|---|")
    for label, (ns, n) in sorted(by_family.items(), key=lambda kv: -kv[1][0]):
        print(f"| {label} | {ns / 1e6:.3f} | {n} | {100 * ns / total:.1f}% |")
    print(f"\n| kernel (top {args.top}) | ms | launches | share |\n|---|---|---|---|")
    for name, (ns, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| `{name}` | {ns / 1e6:.3f} | {n} | {100 * ns / total:.1f}% |")


if __name__ == "__main__":
    main()
