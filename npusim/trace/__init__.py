"""Traces for analysis: binned DRAM, core and NoC activity, per-cycle bank state and the
DRAM command log inside a window, as an ``xarray.Dataset`` in HDF5.

    import npusim
    from npusim.trace import TraceOptions, open_trace
    npusim.simulate("tiny_cnn", trace=TraceOptions("run.h5", window=(0, 5000)))
    ds = open_trace("run.h5")          # or xarray.open_dataset("run.h5")
    ds.row_conflicts.sum("time")       # [channel, bank]

The layout is described in ``npusim.trace.dataset``; README section "Traces".
"""

from npusim.trace.record import DEFAULT_WINDOW, MAX_BINS, TraceOptions

__all__ = ["DEFAULT_WINDOW", "MAX_BINS", "TraceOptions", "check_trace_path", "finish_trace",
           "open_trace", "write_trace"]
_IO = ("check_trace_path", "open_trace", "write_trace")


def __getattr__(name):
    # xarray loads only when a trace is written or read, not with every simulation
    if name in _IO:
        from npusim.trace import io

        return getattr(io, name)
    raise AttributeError(f"module 'npusim.trace' has no attribute '{name}'")


def as_options(trace) -> TraceOptions:
    """``TraceOptions`` from what ``npusim.simulate(trace=...)`` accepts: options or a path."""
    return trace if isinstance(trace, TraceOptions) else TraceOptions(path=trace)


def finish_trace(result, prog, raw):
    """Build the run's trace Dataset, write it where the options say; returns it."""
    from npusim.kernels import state as ks
    from npusim.trace.dataset import build_dataset
    from npusim.trace.io import write_trace

    if raw.fast is not None:  # the layers' times with the extrapolated time in them
        ls = raw.state.cores.layer_st
        raw.trace.layer_times = (ls[ks.L_START].copy(), ls[ks.L_END].copy())
    ds = build_dataset(raw.trace, result, prog, raw.fast)
    if raw.trace.options.path is not None:
        write_trace(ds, raw.trace.options.path)
    return ds
