#!/usr/bin/python3
"""Plot one or more lcurve.out files (dpk-train or DeePMD-kit) into a PNG.

Two panels: rmse_e (eV/atom) and rmse_f (eV/A) against the training step, log scale, training
values as solid lines and validation values as dashed lines, one colour per file.

    /usr/bin/python3 scripts/plot_lcurve.py out/water_f64/lcurve.out -o docs/lcurve.png
    /usr/bin/python3 scripts/plot_lcurve.py f64/lcurve.out f32/lcurve.out --labels float64 float32 \\
        --title "water se_e2_a" --logx -o lcurve.png

Columns are found by name in the '#' header line (step, rmse_e_trn, rmse_e_val, rmse_f_trn,
rmse_f_val; validation columns are optional), so files with or without validation or virial
columns work. Needs numpy and matplotlib (Debian: python3-numpy, python3-matplotlib).
"""

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_lcurve(path):
    """Returns {column name: numpy array} of an lcurve.out file."""
    names = None
    rows = []
    with open(path) as f:
        for line in f:
            text = line.strip()
            if not text:
                continue
            if text.startswith("#"):
                words = text.lstrip("#").split()
                if words and words[0] == "step":
                    if names is not None and words != names:
                        sys.exit(f"plot_lcurve: {path}: the column header changes inside the file")
                    names = words
                continue
            values = text.split()
            if names is None:
                sys.exit(f"plot_lcurve: {path}: no '# step ...' header line before the data")
            if len(values) != len(names):
                sys.exit(f"plot_lcurve: {path}: a line has {len(values)} values, the header names {len(names)}")
            rows.append([float(v) for v in values])
    if not rows:
        sys.exit(f"plot_lcurve: {path}: no data lines")
    data = np.array(rows)
    return {name: data[:, k] for k, name in enumerate(names)}


def main():
    parser = argparse.ArgumentParser(description="Plot rmse_e and rmse_f of lcurve.out files into a PNG.")
    parser.add_argument("files", nargs="+", help="lcurve.out files")
    parser.add_argument("-o", "--output", default="lcurve.png", help="PNG to write (default: lcurve.png)")
    parser.add_argument("--labels", nargs="+", help="one legend label per file (default: the paths)")
    parser.add_argument("--title", default="", help="figure title")
    parser.add_argument("--logx", action="store_true", help="log scale on the step axis too")
    parser.add_argument("--dpi", type=int, default=120, help="resolution (default: 120)")
    args = parser.parse_args()
    labels = args.labels or args.files
    if len(labels) != len(args.files):
        sys.exit("plot_lcurve: --labels needs one label per file")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [("rmse_e", "energy RMSE (eV/atom)"), ("rmse_f", "force RMSE (eV/A)")]
    for index, (path, label) in enumerate(zip(args.files, labels)):
        curve = read_lcurve(path)
        if "step" not in curve:
            sys.exit(f"plot_lcurve: {path}: no 'step' column")
        colour = f"C{index % 10}"
        step = curve["step"]
        if args.logx:  # step 0 cannot be shown on a log axis
            keep = step > 0
        else:
            keep = np.ones_like(step, dtype=bool)
        for axis, (key, _) in zip(axes, panels):
            found = False
            for suffix, style, kind in (("_trn", "-", "train"), ("_val", "--", "validation")):
                name = key + suffix
                if name in curve:
                    axis.plot(step[keep], curve[name][keep], style, color=colour, label=f"{label} {kind}",
                              linewidth=1.2)
                    found = True
            if not found:
                sys.exit(f"plot_lcurve: {path}: no {key}_trn or {key}_val column")
    for axis, (_, ylabel) in zip(axes, panels):
        axis.set_yscale("log")
        if args.logx:
            axis.set_xscale("log")
        axis.set_xlabel("step")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"plot_lcurve: wrote {args.output}")


if __name__ == "__main__":
    main()
