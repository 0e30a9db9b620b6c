"""`npusim trace summary` and `npusim trace plot`: the headline numbers of a trace, and a
figure of bank activity, row-buffer conflicts and per-core utilization over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from npusim.atomic import atomic_file
from npusim.errors import NpusimError


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``; 0% of nothing (a run of 0 cycles)."""
    return _pct(part / whole if whole else 0.0)


def bank_label(ds: xr.Dataset, channel: int, bank: int) -> str:
    b = ds.sel(bank=bank)
    return (f"ch{channel} rank{int(b['rank'])} bg{int(b['bankgroup'])} "
            f"bank{int(b['bank_in_group'])}")


def most_conflicted_banks(ds: xr.Dataset, k: int = 5) -> list[tuple[int, int, int]]:
    """The k (channel, bank, conflicts) with the most row conflicts, most first."""
    total = ds.row_conflicts.sum("time").transpose("channel", "bank").values
    order = np.argsort(total, axis=None, kind="stable")[::-1][:k]
    return [(int(i // total.shape[1]), int(i % total.shape[1]), int(total.flat[i]))
            for i in order if total.flat[i] > 0]


def summary_rows(ds: xr.Dataset) -> list[tuple[str, str]]:
    """(label, text) lines of a trace's headline numbers."""
    a = ds.attrs
    total = int(a["total_cycles"])
    width = int(a["bin_cycles"])
    seconds = total / (int(a["core_freq_mhz"]) * 1e6)
    # the bins hold what was simulated: a fast run's extrapolated cycles have none, so the
    # shares below are of the simulated cycles (of all of them, a fast BERT-base's cores
    # read half as active as in full)
    skipped = int(ds.extrapolated_cycles.sum()) if "extrapolated_cycles" in ds else 0
    binned = total - skipped
    rows = [("model / config", f"{a['model']} on {a['config_name']} (npusim "
                               f"{a['npusim_version']})"),
            ("total cycles", f"{total:,} ({seconds * 1e6:,.1f} µs)")]
    if skipped:
        rows.append(("fidelity", f"fast: {skipped:,} cycles extrapolated ({_share(skipped, total)})"
                                 f", not binned; the counts and shares below are of the "
                                 f"{binned:,} simulated"))
    rows.append(("bins", f"{ds.sizes['time']:,} x {width:,} core cycles ({a['bin_mode']})"))
    active = ds.core_active_cycles.sum("time")
    rows.append(("cores active", ", ".join(_share(int(v), binned) for v in active.values)))
    busy = ds.unit_busy_cycles.sum(("time", "core")) / max(1, binned * ds.sizes["core"])
    rows.append(("unit busy (all cores)", ", ".join(f"{u} {_pct(float(busy.sel(unit=u)))}"
                                                   for u in ds.unit.values)))
    if "reads" in ds:
        hits, misses, conflicts = (int(ds[v].sum()) for v in
                                   ("row_hits", "row_misses", "row_conflicts"))
        n = hits + misses + conflicts
        rows.append(("DRAM", f"{a['dram_standard']}, {ds.sizes['channel']} channel(s) x "
                             f"{ds.sizes['bank']} banks"))
        rows.append(("reads / writes", f"{int(ds.reads.sum()):,} / {int(ds.writes.sum()):,}"))
        rows.append(("row hits / misses / conflicts",
                     f"{hits:,} / {misses:,} / {conflicts:,}"
                     + (f" (hit rate {_pct(hits / n)})" if n else "")))
        bank_busy = ds.bank_busy_cycles.sum("time").transpose("channel", "bank").values
        ch, bk = np.unravel_index(int(np.argmax(bank_busy)), bank_busy.shape)
        dram_cycles = binned * int(a["dram_freq_mhz"]) / int(a["core_freq_mhz"])
        rows.append(("busiest bank", f"{bank_label(ds, ch, bk)}: {int(bank_busy[ch, bk]):,} "
                                     f"DRAM cycles busy "
                                     f"({_share(float(bank_busy[ch, bk]), dram_cycles)})"))
        worst = most_conflicted_banks(ds, 3)
        rows.append(("most conflicted banks", ", ".join(
            f"{bank_label(ds, c, b)} ({n:,})" for c, b, n in worst) or "none"))
        rows.append(("queue occupancy", f"read {float(ds.read_queue_occupancy.mean()):.2f}, "
                                        f"write {float(ds.write_queue_occupancy.mean()):.2f} "
                                        f"requests per channel (mean)"))
        rows.append(("window", f"core cycles {a['window_start_cycle']:,}:"
                               f"{a['window_end_cycle']:,}, {ds.sizes['command']:,} DRAM "
                               f"commands"))
    if "noc_request_flits" in ds:
        rows.append(("NoC flits", f"requests {int(ds.noc_request_flits.sum()):,}, responses "
                                  f"{int(ds.noc_response_flits.sum()):,}"))
    rows.append(("layers / requests", f"{ds.sizes['layer']} / {ds.sizes['request']}"))
    return rows


def plot_trace(ds: xr.Dataset, out: str | Path) -> Path:
    """Bank x time heat maps of busy time and row conflicts (DRAM runs), and per-core
    systolic-array utilization over time; saved as ``out`` (format from its suffix)."""
    if ds.sizes["time"] == 0:
        raise NpusimError("the trace has no time bins: nothing to plot over time")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dram = "bank_busy_cycles" in ds
    panels = 3 if dram else 1
    # colorbars in their own column, so every panel's time axis lines up
    fig, grid = plt.subplots(panels, 2, figsize=(11, 3.2 * panels), squeeze=False,
                             gridspec_kw={"width_ratios": [60, 1]})
    axes, bars = grid[:, 0], grid[:, 1]
    for ax in axes[1:]:
        ax.sharex(axes[0])
    bars[-1].axis("off")
    width = int(ds.attrs["bin_cycles"])
    edges = np.append(ds.time.values, ds.time.values[-1] + width)
    if dram:
        dram_per_bin = width * int(ds.attrs["dram_freq_mhz"]) / int(ds.attrs["core_freq_mhz"])
        n_ch, n_bank = ds.sizes["channel"], ds.sizes["bank"]
        rows = np.arange(n_ch * n_bank + 1)
        for ax, bar, var, label, scale in (
                (axes[0], bars[0], "bank_busy_cycles", "bank busy (fraction of the bin)",
                 dram_per_bin),
                (axes[1], bars[1], "row_conflicts", "row conflicts per bin", 1)):
            z = ds[var].transpose("channel", "bank", "time").values.reshape(n_ch * n_bank, -1)
            mesh = ax.pcolormesh(edges, rows, z / scale, shading="flat",
                                 cmap="viridis" if scale != 1 else "magma")
            fig.colorbar(mesh, cax=bar, label=label)
            ax.set_ylabel("channel x bank")
            if n_ch > 1:
                ax.set_yticks(np.arange(n_ch) * n_bank + n_bank / 2,
                              [f"ch{c}" for c in range(n_ch)], fontsize=6)
        axes[0].set_title(f"{ds.attrs['model']} on {ds.attrs['config_name']}: DRAM bank activity")
    ax = axes[-1]
    util = ds.unit_busy_cycles.sel(unit="systolic") / width
    active = ds.core_active_cycles / width
    centers = ds.time.values + width / 2
    for c in ds.core.values:
        line, = ax.plot(centers, util.sel(core=c), lw=1, label=f"core {c} systolic")
        ax.plot(centers, active.sel(core=c), lw=0.8, ls=":", color=line.get_color())
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("utilization")
    ax.set_xlabel("core cycle")
    if "extrapolated_at_cycle" in ds:  # fast fidelity: the time axis is the simulated one
        for x in ds.extrapolated_at_cycle.values:
            for a in axes:
                a.axvline(x, ls="--", lw=0.7, color="black")
        ax.set_xlabel(f"simulated core cycle (dashed: where fast fidelity extrapolated "
                      f"{int(ds.extrapolated_cycles.sum()):,} cycles, not binned)")
    ax.set_title("per-core systolic-array busy fraction (dotted: core holds a tile)")
    ax.legend(fontsize=7, ncol=min(4, ds.sizes["core"]), loc="upper right")
    fig.tight_layout()
    out = Path(out)
    kind = out.suffix.lower().lstrip(".")
    formats = fig.canvas.get_supported_filetypes()
    if kind not in formats:
        plt.close(fig)
        raise NpusimError(f"--out {out}: the image format comes from the suffix; "
                          f"supported: {', '.join(sorted(formats))}")
    with atomic_file(out, "--out") as tmp:
        fig.savefig(tmp, dpi=110, format=kind)
    plt.close(fig)
    return out
