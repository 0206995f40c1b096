# SPDX-License-Identifier: Apache-2.0
"""Draw the per-kernel latency chart of `make bench` from its results.json.

usage: plot.py RESULTS_JSON OUT_PNG

One point per kernel, kernels ordered by IR size, log scale: a cold llc
process (and llc + ptxas), a miss through the warm daemon, a hit, and the
floor (socket echo + SHA-256 of the same sizes). Without matplotlib it says
the chart was skipped and exits 0: the figures are in the JSON either way.
"""
import json
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: chart skipped: matplotlib is missing (mk/deps.sh bench installs it)")
        return 0
    with open(src) as f:
        r = json.load(f)
    ks = sorted(r["per_kernel"], key=lambda k: k["ir_bytes"])
    x = range(len(ks))

    def series(name, scale=1.0, plus=None):
        ys = []
        for k in ks:
            v = k.get(name)
            if v is not None and plus is not None:
                v = None if k.get(plus) is None else v + k[plus]
            ys.append(None if v is None else v * scale)
        return ys if any(v is not None for v in ys) else None

    fig, ax = plt.subplots(figsize=(11, 5.5))
    lines = [
        ("cold llc + ptxas processes", series("cold_llc_ms", plus="cold_ptxas_ms"), "C3", "v"),
        ("cold llc process", series("cold_llc_ms"), "C1", "o"),
        ("miss ptx then cubin, warm daemon", series("miss_cubin_ms", plus="miss_ptx_ms"), "C4", "^"),
        ("miss ptx, warm daemon", series("miss_ptx_ms"), "C0", "s"),
        ("hit cubin (IR to cubin, both stages)", series("hit_cubin_us", 1e-3), "C5", "x"),
        ("hit ptx", series("hit_ptx_us", 1e-3), "C2", "."),
        ("floor: echo + SHA-256", series("floor_us", 1e-3), "0.5", "_"),
    ]
    for label, ys, color, marker in lines:
        if ys is None:
            continue
        ax.plot(x, [float("nan") if v is None else v for v in ys], marker=marker,
                linestyle="-", linewidth=0.6, markersize=3, color=color, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("kernel (ordered by IR size, %d to %d bytes)" % (ks[0]["ir_bytes"], ks[-1]["ir_bytes"]))
    ax.set_ylabel("latency per kernel (ms, log scale)")
    ax.set_title("ptxcache: %d Triton kernels, cold vs miss vs hit (hit p50 %.0f us, floor p50 %.0f us)"
                 % (r["corpus_kernels"], r["hit_p50_us"], r["floor_p50_us"]))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("bench: chart written to %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
