"""One simulation from user inputs: load, lower, run, collect."""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from npusim.config import NpuConfig, load_config
from npusim.engine import run_program
from npusim.errors import NpusimError
from npusim.frontend import (load_model, resolve_model_path, symbolic_dims,
                             with_example_dims)
from npusim.frontend.graph import Graph
from npusim.frontend.optimize import prepared_model
from npusim.kernels import isa
from npusim.kernels import state as ks
from npusim.lowering import lower_graph, refuse_never_lowered
from npusim.lowering.mapping import parse_mapping_file
from npusim.results import Result, collect
from npusim.workload import check_request


# The cyclic garbage collector's pace during a run (generation 0 every this many allocations;
# Python's default is 700): see ``_collector_paced``.
YOUNG_COLLECTION_EVERY = 100_000


_pacing = {"runs": 0, "before": None}  # runs in progress (threads of a sweep), pace before
_pacing_lock = threading.Lock()


def _collector_paced(run):
    """Run ``run`` with the cyclic garbage collector's young collections
    ``YOUNG_COLLECTION_EVERY`` allocations apart instead of Python's 700, and the previous
    pace restored when the last run in progress ends. A run builds hundreds of thousands
    of objects that live to its end (a Llama-3-8B step: 24,900 layer infos and the
    builder's rows, then a dict per layer for the results) and makes few cycles (a GPT-2
    generation of 4 x 64 tokens: 20,000 objects); at the default pace the collector kept
    rescanning the living ones: 1.4 of the 36 CPU s of a fast Llama step (lowering 3.1 ->
    2.1 s, collecting the results 0.6 -> 0.3 s). Cycles are still collected, less often."""

    @functools.wraps(run)
    def paced(*args, **kwargs):
        with _pacing_lock:
            if _pacing["runs"] == 0:
                _pacing["before"] = gc.get_threshold()
                gc.set_threshold(YOUNG_COLLECTION_EVERY, *_pacing["before"][1:])
            _pacing["runs"] += 1
        try:
            return run(*args, **kwargs)
        finally:
            with _pacing_lock:
                _pacing["runs"] -= 1
                if _pacing["runs"] == 0:
                    gc.set_threshold(*_pacing["before"])

    return paced


@_collector_paced
def simulate(model, config=None, *, overrides=(), mapping=None, dims=None, skip=True,
             progress=None, unsupported="error", optimize="none", trace=None) -> Result:
    if dims is not None and not isinstance(dims, Mapping):
        raise NpusimError(f"dims = {dims!r} must map dim names to sizes, e.g. {{'seq': 128}}")
    if not isinstance(skip, (bool, int)):
        raise NpusimError(f"skip = {skip!r} must be True or False")
    cfg = config if isinstance(config, NpuConfig) else load_config(config, overrides)
    path = resolve_model_path(model)
    dims, assumed = with_example_dims(path, dims)
    with prepared_model(path, optimize, dims) as (ready, ready_dims):
        graph = load_model(ready, ready_dims, _early_refusal(path, unsupported))
    table = parse_mapping_file(mapping) if mapping else None
    prog = lower_graph(graph, cfg, table, unsupported=unsupported)
    raw = run_program(prog, cfg, skip=skip, progress=progress, trace=_trace_options(trace))
    result = collect(Path(path).stem, cfg, prog, raw)
    result.warnings = list(prog.warnings)
    if assumed:  # a bundled model's example dims stood in for --dim
        result.extra["assumed_dims"] = assumed
    _finish_trace(result, prog, raw)
    return result


def _early_refusal(path, unsupported: str):
    """What stops a run as soon as its model file is read (ops of a domain npusim never
    lowers), unless such ops are to run free."""
    if unsupported != "error":
        return None
    return lambda model: refuse_never_lowered(model, str(path))


@_collector_paced
def simulate_requests(requests, config=None, *, overrides=(), mapping=None, skip=True,
                      progress=None, unsupported="error", optimize="none",
                      trace=None) -> Result:
    """Simulate several requests (``npusim.workload.Request``) sharing one NPU.

    Each request, or each group of LLM requests of one architecture and partition (an LLM
    server, batching them iteration by iteration), is one *stream* for the scheduler: the
    policy of ``config.scheduler`` orders the streams' ready layers within each core
    partition, and a stream's first layers wait for its arrival. The result adds, per
    request, arrival, start, finish and latency (LLM requests also time to first token and
    the times between tokens), per-partition utilization and per-stream DRAM traffic.
    """
    from npusim.engine import EngineRun
    from npusim.lowering import capacity_warnings, lower_into
    from npusim.program import ProgramBuilder
    from npusim.scheduling import place
    from npusim.serving.server import LlmServer

    cfg = config if isinstance(config, NpuConfig) else load_config(config, overrides)
    table = parse_mapping_file(mapping) if mapping else None
    requests = list(requests)
    if not requests:
        raise NpusimError("no requests to simulate")
    # (an LLM request's architecture, with its overrides, by request)
    specs = {i: check_request(req, f"request {i + 1}") for i, req in enumerate(requests)}
    # streams: each plain request alone; LLM requests grouped by architecture and partition
    streams: list[list[int]] = []
    llm_groups: dict[tuple, int] = {}
    for i, req in enumerate(requests):
        if req.is_llm:
            key = (specs[i], req.partition)
            if key not in llm_groups:
                llm_groups[key] = len(streams)
                streams.append([])
            streams[llm_groups[key]].append(i)
        else:
            streams.append([i])
    placement = place(cfg, [min(requests[i].arrival_cycle for i in s) for s in streams],
                      [requests[s[0]].partition for s in streams],
                      [f"request {requests[s[0]].label!r}" for s in streams])
    builder = ProgramBuilder()
    warnings = []
    servers: list[LlmServer] = []
    loaded: dict[tuple, Graph] = {}  # by model and dims: a request's copies load once
    for sid, members in enumerate(streams):
        req = requests[members[0]]
        if req.is_llm:
            servers.append(LlmServer(sid, specs[members[0]],
                                     [(i, requests[i]) for i in members], cfg, builder))
            continue
        key = (req.model, tuple(sorted((req.dims or {}).items())))
        if key not in loaded:
            where = f"request {members[0] + 1} ({req.label})"
            try:
                path = resolve_model_path(req.model)
            except NpusimError as err:  # which request names it (a file may hold many)
                raise NpusimError(f"{where}: {err}") from None
            req_dims, _ = with_example_dims(path, req.dims or None)
            unbound = [d for d in symbolic_dims(path)[1] if d not in (req_dims or {})]
            if unbound:
                raise NpusimError(
                    f"{where}: {Path(path).name} has unbound "
                    f"symbolic dimension(s) {', '.join(map(repr, unbound))}; give them in the "
                    f"request: dims = {{ {', '.join(f'{d} = N' for d in unbound)} }}")
            try:
                with prepared_model(path, optimize, req_dims) as (ready, ready_dims):
                    loaded[key] = load_model(ready, ready_dims,
                                             _early_refusal(path, unsupported))
            except NpusimError as err:  # (a dim it has not: batch = 4 on tiny_cnn)
                raise NpusimError(f"{where}: {err}") from None
        # (lowering adds its scratch tensors to the graph: each request its own table)
        graph = replace(loaded[key], tensors=dict(loaded[key].tensors))
        builder.request, builder.release = sid, req.arrival_cycle
        warnings += lower_into(builder, graph, cfg, table, unsupported,
                               prefix=f"{req.name or members[0]}/")
    watch = [srv.schedule(-1) for srv in servers]
    run = EngineRun(builder.build(), cfg, skip=skip, placement=placement,
                    trace=_trace_options(trace))
    run.notify_on(watch)
    while run.advance(progress):
        new = []
        for srv in servers:
            it = srv.pending
            if it is not None and run.layer_end_cycle(it.last_layer) >= 0:
                srv.iteration_ended(run.layer_end_cycle(it.last_layer))
                last = srv.schedule(run.now_cycle)
                if last is not None:
                    new.append(last)
        if new:
            run.extend(builder.build())
            run.notify_on(new)
    prog, raw = run.prog, run.result()
    result = collect("+".join(dict.fromkeys(Path(r.model).stem for r in requests)), cfg,
                     prog, raw)
    result.warnings = warnings + capacity_warnings(builder, cfg)
    if table is not None:
        result.warnings += table.unused_warnings()
    _request_results(result, requests, streams, servers, prog, raw, placement)
    _finish_trace(result, prog, raw)
    return result


def _request_results(result, requests, streams, servers, prog, raw, placement) -> None:
    """Per-request, per-stream and per-partition numbers for ``result``."""
    P = raw.timebase.core_period
    layer_st = raw.state.cores.layer_st
    layer_start = -(-layer_st[ks.L_START] // P)
    stream_of_layer = prog.layer[:, isa.L_REQUEST]
    moved = layer_st[ks.L_LD_BYTES] + layer_st[ks.L_ST_BYTES]
    per_stream = np.bincount(stream_of_layer, weights=moved, minlength=len(streams))
    layer_j = np.array([l["energy_j"] for l in result.layers])
    joules = np.bincount(stream_of_layer, weights=layer_j, minlength=len(streams))
    freq = result.config.core_freq_mhz * 1e6
    rows: dict[int, dict] = {}
    for srv in servers:
        rows.update(srv.request_results(layer_start, layer_j))
    layers_of: dict[int, list[dict]] = {}  # by stream (one pass: 10,000 requests took minutes)
    for layer, sid in zip(result.layers, stream_of_layer.tolist()):
        layers_of.setdefault(sid, []).append(layer)
    for sid, members in enumerate(streams):
        if len(members) == 1 and not requests[members[0]].is_llm:
            i = members[0]
            req = requests[i]
            mine = layers_of.get(sid, [])
            # (a model whose every node folds runs no layer: done on arrival)
            start = min((l["start_cycle"] for l in mine), default=req.arrival_cycle)
            finish = max((l["end_cycle"] for l in mine), default=req.arrival_cycle)
            latency = finish - req.arrival_cycle
            rows[i] = {"name": req.name, "model": Path(req.model).stem, "dims": req.dims,
                       "arrival_cycle": req.arrival_cycle, "start_cycle": start,
                       "finish_cycle": finish, "latency_cycles": latency,
                       "dram_bytes": int(per_stream[sid]),
                       "dram_gbps": per_stream[sid] / (latency / freq) / 1e9 if latency else 0.0,
                       "energy_j": float(joules[sid])}
    for sid, members in enumerate(streams):
        for i in members:
            rows[i]["stream"] = sid
            rows[i]["partition"] = int(placement.req[sid, ks.R_PART])
    result.requests = [rows[i] for i in range(len(requests))]
    total = max(result.total_cycles, 1)
    busy = [c["busy_cycles"] for c in result.cores]
    result.extra["partitions"] = [
        {"partition": k, "cores": cores,
         "utilization": sum(busy[c] for c in cores) / (len(cores) * total),
         "streams": [sid for sid in range(len(streams))
                     if placement.req[sid, ks.R_PART] == k]}
        for k, cores in enumerate(placement.partitions)]
    result.extra["llm_servers"] = [
        {"stream": srv.stream, "model": srv.spec.describe(),
         "dram_bytes": int(per_stream[srv.stream]), "energy_j": float(joules[srv.stream]),
         "iterations": srv.iteration_results()}
        for srv in servers]


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

        start, end = raw.trace.options.window
        if start >= result.total_cycles:  # (the bins still cover the whole run)
            result.warnings.append(f"trace window {start}:{end} starts after the run ended "
                                   f"({result.total_cycles} cycles): the trace holds no "
                                   f"per-cycle bank state or DRAM commands")
        result.trace = finish_trace(result, prog, raw)
