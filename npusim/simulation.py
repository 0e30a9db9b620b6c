"""One simulation from user inputs: load, lower, run, collect."""

from __future__ import annotations

from pathlib import Path

from npusim.config import NpuConfig, load_config
from npusim.engine import run_program
from npusim.frontend import load_model, resolve_model_path
from npusim.frontend.optimize import prepared_model
from npusim.lowering import lower_graph
from npusim.lowering.mapping import parse_mapping_file
from npusim.results import Result, collect


def simulate(model, config=None, *, overrides=(), mapping=None, dims=None, skip=True,
             progress=None, unsupported="error", optimize="none", trace=None) -> Result:
    cfg = config if isinstance(config, NpuConfig) else load_config(config, list(overrides))
    path = resolve_model_path(model)
    with prepared_model(path, optimize, dims) as (ready, ready_dims):
        graph = load_model(ready, ready_dims)
    table = parse_mapping_file(mapping) if mapping else None
    prog = lower_graph(graph, cfg, table, unsupported=unsupported)
    raw = run_program(prog, cfg, skip=skip, progress=progress, trace=_trace_options(trace))
    result = collect(Path(path).stem, cfg, prog, raw)
    result.warnings = list(prog.warnings)
    _finish_trace(result, prog, raw)
    return result


def simulate_requests(requests, config=None, *, overrides=(), mapping=None, skip=True,
                      progress=None, unsupported="error", optimize="none",
                      trace=None) -> Result:
    """Simulate several requests (``npusim.workload.Request``) sharing one NPU.

    Layers of all requests compete for the cores; a request's first layers wait for its
    arrival. The result adds per-request arrival, start, finish and latency.
    """
    from npusim.lowering import lower_into
    from npusim.program import ProgramBuilder

    cfg = config if isinstance(config, NpuConfig) else load_config(config, list(overrides))
    table = parse_mapping_file(mapping) if mapping else None
    builder = ProgramBuilder()
    warnings = []
    for i, req in enumerate(requests):
        with prepared_model(resolve_model_path(req.model), optimize,
                            req.dims or None) as (ready, ready_dims):
            graph = load_model(ready, ready_dims)
        builder.request, builder.release = i, req.arrival_cycle
        warnings += lower_into(builder, graph, cfg, table, unsupported,
                               prefix=f"{req.name or i}/")
    prog = builder.build()
    raw = run_program(prog, cfg, skip=skip, progress=progress, trace=_trace_options(trace))
    result = collect("+".join(r.name or Path(r.model).stem for r in requests), cfg, prog, raw)
    result.warnings = warnings
    result.requests = []
    for i, req in enumerate(requests):
        layers = [l for l, info in zip(result.layers, prog.layers) if info.request == i]
        start = min(l["start_cycle"] for l in layers)
        finish = max(l["end_cycle"] for l in layers)
        result.requests.append({"name": req.name, "model": Path(req.model).stem,
                                "dims": req.dims, "arrival_cycle": req.arrival_cycle,
                                "start_cycle": start, "finish_cycle": finish,
                                "latency_cycles": finish - req.arrival_cycle})
    _finish_trace(result, prog, raw)
    return result


def _trace_options(trace):
    """``trace`` (None, a path, or ``npusim.trace.TraceOptions``) as options or None."""
    if trace is None:
        return None
    from npusim.trace import as_options

    return as_options(trace)


def _finish_trace(result: Result, prog, raw) -> None:
    """Attach the trace Dataset to the result (``result.trace``) and write its file."""
    if raw.trace is not None:
        from npusim.trace import finish_trace

        result.trace = finish_trace(result, prog, raw)
