"""npusim: a fast cycle-level simulator of multi-core NPUs, driven by ONNX models.

The public API is small::

    import npusim
    result = npusim.simulate("tiny_cnn", config="mobile")
    result.total_cycles, result.to_dict()
    result = npusim.simulate_requests(npusim.read_requests("requests.toml", 1000), "server")

Everything heavy (onnx, numba) is imported on first use, so ``npusim --help`` stays fast.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "simulate", "simulate_requests", "read_requests", "Request"]


def simulate(model, config=None, *, overrides=(), mapping=None, dims=None, skip=True,
             progress=None, unsupported="error", optimize="none", trace=None):
    """Simulate an ONNX model (a path or a bundled model name) on an NPU config.

    ``config`` is a preset name, a TOML or ONNXim JSON path, or an ``NpuConfig``;
    ``overrides`` are ``dotted.key=value`` strings; ``mapping`` an ONNXim mapping file;
    ``dims`` binds dynamic dimensions; ``skip=False`` steps every cycle (debugging);
    ``unsupported="zero-cost"`` treats ops npusim cannot lower as free (with a warning);
    ``optimize="basic"|"extended"`` runs ONNX Runtime's graph optimizer on the model first;
    ``trace`` (a path or ``npusim.trace.TraceOptions``) records a trace (``result.trace``).
    Returns a :class:`npusim.results.Result`.
    """
    from npusim.simulation import simulate as _simulate

    return _simulate(model, config, overrides=overrides, mapping=mapping, dims=dims,
                     skip=skip, progress=progress, unsupported=unsupported,
                     optimize=optimize, trace=trace)


def simulate_requests(requests, config=None, **kwargs):
    """Simulate several requests (``Request`` objects, e.g. from :func:`read_requests`)
    sharing one NPU under the config's scheduler; LLM requests are served with
    iteration-level batching. Keyword arguments as :func:`simulate` (but ``dims``)."""
    from npusim.simulation import simulate_requests as _simulate_requests

    return _simulate_requests(requests, config, **kwargs)


def read_requests(path, core_freq_mhz: int):
    """The requests of a request file (TOML, JSON, or ONNXim models-list JSON)."""
    from npusim.workload import read_requests as _read_requests

    return _read_requests(path, core_freq_mhz)


def __getattr__(name):
    if name == "Request":
        from npusim.workload import Request

        return Request
    raise AttributeError(f"module 'npusim' has no attribute {name!r}")
