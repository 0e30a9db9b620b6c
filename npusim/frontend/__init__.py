"""ONNX front end: load a model's structure and static shapes into the graph IR."""

from npusim.frontend.graph import Graph, Node, TensorInfo
from npusim.frontend.onnx_loader import (
    data_sized_dims,
    default_dims,
    list_bundled_models,
    load_graph,
    load_model,
    resolve_model_path,
    symbolic_dims,
    value_inputs,
    with_example_dims,
)

__all__ = [
    "data_sized_dims",
    "default_dims",
    "Graph",
    "Node",
    "TensorInfo",
    "list_bundled_models",
    "load_graph",
    "load_model",
    "resolve_model_path",
    "symbolic_dims",
    "value_inputs",
    "with_example_dims",
]
