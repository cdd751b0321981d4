#!/usr/bin/env python3
"""The shape of a training step from kernel sequences, for dpk-busy-barriers --regions-us.

Reads one or more DPK_KERNEL_SEQUENCE files that libdpk-kernel-times.so wrote (runs of the
same input), cuts each into steps at the kernel --step-end (the last kernel of a step: Adam's
update), drops the first --skip steps, and prints for every kernel of a step (position, name)
its mean wall time and the mean gap before it (host code between kernels), averaged over the
steps and the runs. The last line is the step as dpk-busy-barriers --regions-us takes it: the
CPU microseconds of work of each kernel (wall x --threads) in order, each gap of at least
--min-gap-us as a serial entry 's<us>'. --merge A-B,C-D joins the kernels at positions A..B
(and C..D) into one region each (the gaps inside dropped): what the step would lose on a busy
node if those kernels ran as one parallel region (docs/tuning.md, "The step's shape").

  KOKKOS_PROFILE_LIBRARY=build/openmp/benchmarks/libdpk-kernel-times.so \\
  DPK_KERNEL_SEQUENCE=seq.txt OMP_NUM_THREADS=2 dpk-train train input.json
  python3 benchmarks/step_shape.py seq.txt --threads 2
"""

import argparse
import collections
import sys


def read_calls(path):
    """[(start_us, end_us, 'kind name'), ...] of one sequence file."""
    calls = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.startswith('#') or not line.strip():
                continue
            parts = line.split(None, 2)
            if len(parts) != 3:
                sys.exit(f"step_shape.py: {path}:{number}: expected 'start_us end_us kind name', got {line.strip()!r}")
            try:
                calls.append((float(parts[0]), float(parts[1]), parts[2].strip()))
            except ValueError:
                sys.exit(f"step_shape.py: {path}:{number}: start and end must be numbers, got {line.strip()!r}")
    return calls


def steps_of(calls, step_end):
    """The calls cut into steps, each ending with a call named step_end (the kind is ignored)."""
    steps, current = [], []
    for call in calls:
        current.append(call)
        if call[2].split(' ', 1)[-1] == step_end:
            steps.append(current)
            current = []
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('sequences', nargs='+', help='DPK_KERNEL_SEQUENCE files of runs of the same input')
    ap.add_argument('--step-end', default='dpk::train::adam::step', help='name of the last kernel of a step')
    ap.add_argument('--skip', type=int, default=30,
                    help='steps dropped at the start of each run, the first (with the set-up) always (default 30)')
    ap.add_argument('--threads', type=int, default=2, help='threads of the runs: work = wall x threads (default 2)')
    ap.add_argument('--min-gap-us', type=float, default=20, help='gaps listed as serial work from (default 20)')
    ap.add_argument('--merge', default='', help='positions A-B,C-D to join into one region each')
    args = ap.parse_args()
    if args.threads < 1 or args.skip < 0:
        sys.exit('step_shape.py: --threads must be >= 1 and --skip >= 0')

    runs = []
    for path in args.sequences:
        steps = steps_of(read_calls(path), args.step_end)
        steps = [(steps[k - 1][-1][1], s) for k, s in enumerate(steps) if k >= max(args.skip, 1)]
        if not steps:
            sys.exit(f"step_shape.py: {path}: no step after the first {args.skip} ends with '{args.step_end}'")
        runs.append((path, steps))
    # steps differ in length (a kept batch setup skips kernels): use the commonest layout
    layouts = collections.Counter(tuple(c[2] for c in s) for _, steps in runs for _, s in steps)
    layout = layouts.most_common(1)[0][0]
    width = len(layout)
    duration, gap = [0.0] * width, [0.0] * width
    used = 0
    for path, steps in runs:
        kept = [(before, s) for before, s in steps if tuple(c[2] for c in s) == layout]
        wall = sum(s[-1][1] - before for before, s in kept) / len(kept)
        kernels = sum(c[1] - c[0] for _, s in kept for c in s) / len(kept)
        print(f'# {path}: {len(kept)} of {len(steps)} steps, wall {wall / 1e3:.2f} ms per step, '
              f'kernels {kernels / 1e3:.2f}, between kernels {(wall - kernels) / 1e3:.2f}')
        for before, s in kept:
            for i, c in enumerate(s):
                duration[i] += c[1] - c[0]
                gap[i] += c[0] - (s[i - 1][1] if i > 0 else before)
        used += len(kept)
    duration = [d / used for d in duration]
    gap = [g / used for g in gap]
    print('# position  wall_us  gap_before_us  kernel')
    for i, name in enumerate(layout):
        print(f'{i:4d} {duration[i]:10.1f} {gap[i]:10.1f}  {name}')

    merged = {}
    for item in filter(None, args.merge.split(',')):
        try:
            a, b = (int(x) for x in item.split('-'))
        except ValueError:
            sys.exit(f"step_shape.py: --merge: expected A-B (positions), got '{item}'")
        if not 0 <= a <= b < width:
            sys.exit(f"step_shape.py: --merge: '{item}' is not a range of positions 0..{width - 1}")
        if any(a <= d and c <= b for c, d in merged.items()):
            sys.exit(f"step_shape.py: --merge: '{item}' overlaps another range")
        merged[a] = b
    shape, i = [], 0
    while i < width:
        if gap[i] >= args.min_gap_us:
            shape.append(f's{gap[i]:.0f}')
        last = merged.get(i, i)
        shape.append(f'{sum(duration[i:last + 1]) * args.threads:.0f}')
        i = last + 1
    print('--regions-us ' + ','.join(shape))


if __name__ == '__main__':
    main()
