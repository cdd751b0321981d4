#!/usr/bin/env python3
"""Group the samples of a `perf record` of a dpk training step by part of the step.

    perf record -F 999 -o step.data build/openmp/benchmarks/bench_model \\
        --benchmark_filter='training_gradient_float/1/' --benchmark_min_time=3
    benchmarks/perf_groups.py step.data 41.0      # 41.0: ms per step measured in that run

Prints each group's share of the samples and its time per step (share x the given ms). The
groups are regular expressions over the symbol names of dpk's kernels and OpenBLAS
(docs/performance.md, "Seventh session"); a symbol counts in the first group that matches.
"""
import re
import subprocess
import sys

GROUPS = [
    ("dpk product kernels (small-matrix, two-pair sums, long sums)", r"small_gemm|tn_sum_tile|long_sum_gemm"),
    ("OpenBLAS small-matrix kernels", r"gemm_small_kernel"),
    ("OpenBLAS packed kernel", r"[sd]gemm_kernel"),
    ("OpenBLAS packing, zeroing C", r"[sd]gemm_(i|o)[nt]copy|gemm_beta|memset"),
    ("tanh forward layer", r"dense_tanh_in_thread|run_dense_tanh<false|tanh_host_span"),
    ("tangent layer", r"layer_tangent|run_dense_tanh<true|tangent_blocks"),
    ("reverse elementwise, inner outputs", r"layer_reverse|layer_outputs_in_thread|reverse_layers"),
    ("first-order elementwise and skip", r"run_dense_cotangent<false|layer_skip_cotangent"),
    ("se_a contractions, seeds, cotangents",
     r"contract_rows|embedding_cotangent|descriptor_cotangent|finish_contraction|environment_cotangent"
     r"|_Function_handler<.*DescriptorStage"),
    ("neighbour search", r"NeighborSearch|CellList|reverse_neighbors|coincident"),
    ("environment matrix, forces", r"environment_matrix|force_virial"),
    ("Adam", r"Adam<"),
]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: perf_groups.py PERF_DATA MS_PER_STEP")
    data, ms = sys.argv[1], float(sys.argv[2])
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol"],
                            capture_output=True, text=True, check=True).stdout
    share = {name: 0.0 for name, _ in GROUPS}
    other = 0.0
    for line in report.splitlines():
        m = re.match(r"\s+([0-9.]+)%\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        percent, symbol = float(m.group(1)), m.group(2)
        for name, pattern in GROUPS:
            if re.search(pattern, symbol):
                share[name] += percent
                break
        else:
            other += percent
    for name, _ in GROUPS:
        print(f"{name:40s} {share[name]:5.1f} %  {share[name] * ms / 100:6.2f} ms")
    print(f"{'other':40s} {other:5.1f} %  {other * ms / 100:6.2f} ms")


if __name__ == "__main__":
    main()
