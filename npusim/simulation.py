"""One simulation from user inputs: load, lower, run, collect."""

from __future__ import annotations

from pathlib import Path

from npusim.config import NpuConfig, load_config
from npusim.engine import run_program
from npusim.frontend import load_model, resolve_model_path
from npusim.lowering import lower_graph
from npusim.lowering.mapping import parse_mapping_file
from npusim.results import Result, collect


def simulate(model, config=None, *, overrides=(), mapping=None, dims=None, skip=True,
             progress=None, unsupported="error") -> Result:
    cfg = config if isinstance(config, NpuConfig) else load_config(config, list(overrides))
    path = resolve_model_path(model)
    graph = load_model(path, dims)
    table = parse_mapping_file(mapping) if mapping else None
    prog = lower_graph(graph, cfg, table, unsupported=unsupported)
    raw = run_program(prog, cfg, skip=skip, progress=progress)
    result = collect(Path(path).stem, cfg, prog, raw)
    result.warnings = list(prog.warnings)
    return result
