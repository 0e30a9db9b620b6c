"""ONNX graph -> Program. One lowering function per op type, in ``LOWERINGS``; each op
family's module (gemm, conv, layout, vector, attention) contributes its entries.

An op type with no entry is never silently free: :func:`lower_graph` lists every
unsupported op (with node names) before doing any work and stops.
"""

from __future__ import annotations

from typing import Callable

import onnx

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.frontend.graph import Graph, Node
from npusim.frontend.quantized import QUANTIZED
from npusim.frontend.shapes import ALWAYS_FOLDED
from npusim.lowering.context import LoweringContext
from npusim.lowering.conv import SPATIAL_RANKS, lower_conv
from npusim.lowering.gemm import (lower_gemm, lower_matmul, lower_matmul_bnb4, lower_matmul_fpq4,
                                  lower_matmul_nbits)
from npusim.lowering import (attention, causal_conv, conv_transpose, data_sized, deform_conv,
                              einsum, linear_attention, moe, movement, recurrent, spectral,
                              vector)
from npusim.lowering.fusion import fused_input, plan_fusions, vector_groups
from npusim.lowering.layout import lower_empty, lower_free, lower_relabel
from npusim.lowering.mapping import MappingTable
from npusim.lowering.weights import EMBEDDING_FORM, embedding_form
from npusim.program import Program, ProgramBuilder

LOWERINGS: dict[str, Callable[[LoweringContext, Node], None]] = {
    "MatMul": lower_matmul,
    "Gemm": lower_gemm,
    "MatMulNBits": lower_matmul_nbits,  # ONNX Runtime's weight-only quantized MatMul
    "MatMulBnb4": lower_matmul_bnb4,  # ... with bitsandbytes' FP4/NF4 weights
    "MatMulFpQ4": lower_matmul_fpq4,  # ... with MLAS's pre-packed 4-bit blocks
    "Conv": lower_conv,
    "Reshape": lower_relabel,
    "Flatten": lower_relabel,
    "Squeeze": lower_relabel,
    "Unsqueeze": lower_relabel,
    "Identity": lower_relabel,
    "Dropout": lower_relabel,  # inference: the output is the input
    "BitCast": lower_relabel,
    "ExpandDims": lower_relabel,  # ONNX Runtime's Unsqueeze with the axis as an input
    # ONNX Runtime's CPU layout (com.microsoft.nchwc: MLAS's blocks of channels) in and out;
    # its Conv, MaxPool, ... run as their ONNX namesakes in npusim's own layout, so the
    # conversions move nothing (as in ONNXim, whose CNNs are written this way)
    "ReorderInput": lower_relabel,
    "ReorderOutput": lower_relabel,
    **vector.LOWERINGS,
    **movement.LOWERINGS,
    **einsum.LOWERINGS,
    **conv_transpose.LOWERINGS,
    **attention.LOWERINGS,
    **recurrent.LOWERINGS,
    **spectral.LOWERINGS,
    **deform_conv.LOWERINGS,
    **causal_conv.LOWERINGS,
    **linear_attention.LOWERINGS,
    **moe.LOWERINGS,
    **data_sized.LOWERINGS,
}
# element-wise ops that may share one vector pass with their neighbours (fusion.vector_groups)
GROUPABLE = {op for op, lower in LOWERINGS.items()
             if lower is vector.lower_elementwise and op not in vector.NOT_IN_PASSES}


# Ops npusim does not lower, and why (the up-front error quotes the reason). Every op of the
# standard set is in LOWERINGS, folded by the front end (frontend.shapes.ALWAYS_FOLDED),
# mapped to a float op (frontend.quantized.QUANTIZED) or here; tests/test_onnx_package.py
# checks it for the installed onnx. ONNX Runtime ops are here when a reason helps.
_SEQUENCES = "sequence and optional values: npusim lowers tensors only"
_CONTROL = ("data-dependent control flow (a Loop or Scan is unrolled when its trip count "
            "and condition are constants); export the model with loops unrolled")
_BRANCH = ("a branch on data (an If is inlined when its condition is a constant: one on an "
           "input holding one integer, such as a sample rate, is fixed with --dim "
           "NAME=VALUE)")
_RANDOM = "random number generation: no NPU cost model"
_NOT_NPU = "not NPU work (strings, image decoding, training losses)"
_NOT_YET = "no lowering yet"
_GENERATION = ("ONNX Runtime's generation loop: it runs its decoder subgraph once per token "
               "until the data stops it; simulate the decoder alone, or the generation as an "
               "LLM request (prompt and generate tokens: README, LLM serving)")
CANNOT_LOWER: dict[str, str] = {
    **dict.fromkeys(["SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                     "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
                     "ConcatFromSequence", "Optional", "OptionalGetElement",
                     "OptionalHasElement"], _SEQUENCES),
    **dict.fromkeys(["Loop", "Scan"], _CONTROL),
    "If": _BRANCH,
    **dict.fromkeys(["Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                     "RandomUniform", "RandomUniformLike"], _RANDOM),
    **dict.fromkeys(["StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch",
                     "TfIdfVectorizer", "ImageDecoder", "SoftmaxCrossEntropyLoss",
                     "NegativeLogLikelihoodLoss"], _NOT_NPU),
    **dict.fromkeys(["Det", "MaxRoiPool"], _NOT_YET),
    **dict.fromkeys(["BeamSearch", "GreedySearch", "Sampling", "WhisperBeamSearch"],
                    _GENERATION),
}


# Lowered op types whose lowering takes only some forms yet: (can it lower this node?, why
# not). Such nodes are listed up front like the op types above.
_CONV_RANKS = (lambda g, n: len(g.shape(n.inputs[0])) - 2 in SPATIAL_RANKS,
               "the convolution loop nest takes 1, 2 or 3 spatial dims")
LIMITS: dict[str, tuple[Callable[[Graph, Node], bool], str]] = {
    "Conv": _CONV_RANKS, "FusedConv": _CONV_RANKS,
    "GatherBlockQuantized": (embedding_form, f"npusim lowers {EMBEDDING_FORM}"),
    "RoiAlign": (lambda g, n: int(n.attrs.get("sampling_ratio", 0)) > 0,
                 "sampling_ratio 0 samples as many points as each box covers, which depends "
                 "on the boxes (data); export with a sampling_ratio >= 1"),
}


_ML = ("classical machine learning (ai.onnx.ml: trees, linear models, scalers, "
       "encoders): not NPU work")
# Domains none of whose ops npusim lowers, and why: refused as soon as the file is read
NEVER_LOWERED_DOMAINS = {"ai.onnx.ml": _ML}


def _why_not(op: str, domain: str = "") -> str:
    if domain in NEVER_LOWERED_DOMAINS:
        return NEVER_LOWERED_DOMAINS[domain]
    if op in ALWAYS_FOLDED:
        return ("shape arithmetic on a shape npusim could not work out: after an op listed "
                "here, or from input values")
    reason = CANNOT_LOWER.get(op) or (LIMITS[op][1] if op in LIMITS else "")
    if not reason and domain in ("", "ai.onnx", "com.microsoft") and not onnx.defs.has(op, ""):
        return ("not an ONNX op, nor an ONNX Runtime contrib op npusim lowers: maybe a "
                "framework op the exporter left in, as tf2onnx leaves Erfc or "
                "StatefulPartitionedCall")
    if not reason and domain not in ("", "ai.onnx", "com.microsoft"):
        return f"an op of domain '{domain}', which npusim has no cost model for"
    return reason


def _listing(missing: dict[str, list[str]], domains: dict[str, str]) -> list[str]:
    """One line per op type npusim cannot lower: a few node names and why."""
    why = {op: _why_not(op, domains.get(op, "")) for op in missing}
    return [f"  {op}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
            + (f" ({why[op]})" if why[op] else "")
            for op, names in sorted(missing.items())]


def _unsupported_error(model: str, listing: list[str]) -> NpusimError:
    return NpusimError(f"model '{model}' uses op types npusim cannot lower:\n"
                       + "\n".join(listing)
                       + f"\nsupported op types: {', '.join(sorted({*LOWERINGS, *QUANTIZED}))}"
                       + "\n(unsupported = zero-cost treats them as free instead: "
                         "--unsupported zero-cost, or workload.unsupported in a sweep)")


def refuse_never_lowered(model, name: str) -> None:
    """Stop at once when an ONNX ``model`` (a ModelProto just read) holds ops of a domain
    npusim never lowers, with the same message lowering gives: loading first (a tree
    ensemble's attributes run to hundreds of MB) took a minute only to be refused."""
    missing: dict[str, list[str]] = {}
    domains: dict[str, str] = {}
    for i, n in enumerate(model.graph.node):
        if n.domain in NEVER_LOWERED_DOMAINS:  # (unnamed: as the loader names it)
            missing.setdefault(n.op_type, []).append(n.name or f"{n.op_type}_{i}")
            domains[n.op_type] = n.domain
    if missing:
        raise _unsupported_error(name, _listing(missing, domains))


def _lowerable(graph: Graph, node: Node) -> bool:
    if node.op_type not in LOWERINGS:
        return False
    limit = LIMITS.get(node.op_type)
    return limit is None or node.inputs[0] not in graph.tensors or limit[0](graph, node)


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    """Op type -> names of the nodes npusim cannot lower."""
    missing: dict[str, list[str]] = {}
    for node in graph.nodes:
        if not _lowerable(graph, node):
            missing.setdefault(node.op_type, []).append(node.name)
    return missing


def lower_graph(graph: Graph, config: NpuConfig, mapping: MappingTable | None = None,
                unsupported: str = "error") -> Program:
    """Lower every node of ``graph`` into tiles for ``config``.

    Ops npusim cannot lower stop the run with a list of them, unless ``unsupported`` is
    ``"zero-cost"``: then they take no time and the program carries a warning naming them.
    """
    builder = ProgramBuilder()
    warnings = lower_into(builder, graph, config, mapping, unsupported)
    program = builder.build()
    program.warnings += warnings + capacity_warnings(builder, config)
    if mapping is not None:
        program.warnings += mapping.unused_warnings()
    return program


def capacity_warnings(builder: ProgramBuilder, config: NpuConfig) -> list[str]:
    """Warnings when the tensors laid out so far (weights, activations, KV caches; nothing
    is freed) need more DRAM than ``memory.capacity_gib`` (0: unbounded), or more than a
    cycle-level DRAM's address mapping decodes: addresses above that alias lower ones, as
    in Ramulator, so unrelated tensors share banks and rows (a Llama-3-8B step of 128
    requests at context 1023 lays out 32 GiB; ``server`` decodes 16)."""
    from npusim.dram.standard import decoded_bytes, dram_standard

    used = builder.next_free_address
    out = []
    cap = config.memory.capacity_gib
    if cap and used > cap * 2**30:
        out.append(f"the workload's tensors take {used / 2**30:.2f} GiB of DRAM, more than "
                   f"memory.capacity_gib = {cap} GiB (npusim lays every tensor out once and "
                   f"frees none; the run goes on)")
    decoded = decoded_bytes(config)
    if decoded is not None and used > decoded:
        gib = f"{decoded / 2**30:g} GiB"
        out.append(f"the workload's tensors take {used / 2**30:.2f} GiB of DRAM, more than "
                   f"the {gib} the address mapping decodes ({config.memory.channels} "
                   f"channel(s) x {config.memory.ranks} rank(s) of "
                   f"{dram_standard(config).name}): each address above it goes where its "
                   f"address modulo {gib} would, sharing banks and rows with the tensors "
                   f"there (more memory.channels or memory.ranks decode more)")
    return out


# No tensor of a model npusim simulates is this large: far beyond any NPU's memory, and its
# tiles would not fit the host's (a dim of 10^12 is a typo, not a workload).
MAX_TENSOR_BYTES = 2**40


def _model_name(graph: Graph) -> str:
    """The file a graph came from (an exporter's graph name, e.g. main_graph, says little)."""
    return graph.source_path or graph.name


def _check_sizes(graph: Graph, config: NpuConfig) -> None:
    for t in graph.tensors.values():
        if t.shape is not None and t.numel * config.precision > MAX_TENSOR_BYTES:
            raise NpusimError(
                f"model '{_model_name(graph)}': tensor '{t.name}' of shape {list(t.shape)} is "
                f"{t.numel * config.precision:,} B at {config.precision} B per element, more "
                f"than npusim simulates ({MAX_TENSOR_BYTES:,} B, 1 TiB); check the model's "
                f"dims (--dim)")


def lower_into(builder: ProgramBuilder, graph: Graph, config: NpuConfig,
               mapping: MappingTable | None = None, unsupported: str = "error",
               prefix: str = "") -> list[str]:
    """Lower ``graph`` into ``builder`` (which may already hold other requests' layers);
    layer names get ``prefix``. Returns warnings for the user."""
    if unsupported not in ("error", "zero-cost"):
        raise NpusimError(f"unsupported = {unsupported!r}: must be 'error' or 'zero-cost'")
    graph.check_counts()
    missing = unsupported_ops(graph)
    domains = {n.op_type: n.domain for n in graph.nodes if n.op_type in missing}
    listing = _listing(missing, domains)
    if missing and unsupported == "error":
        raise _unsupported_error(_model_name(graph), listing)
    graph.check_shapes()
    _check_sizes(graph, config)
    ctx = LoweringContext(graph=graph, config=config, builder=builder, mapping=mapping)
    first = builder.n_layers
    fused, ctx.waits = plan_fusions(graph)
    ctx.groups = vector_groups(graph, fused, GROUPABLE, vector.MAX_SLOTS)
    head_of = {n.name: first for first, g in ctx.groups.items() for n in g.nodes[1:]}
    for name, root in fused.items():
        node = graph.node(name)
        if node.op_type == "BatchNormalization":
            ctx.folded_bias.setdefault(root, node.inputs[2])  # its shift B
        elif node.op_type == "Add":
            src = fused_input(graph, node)
            ctx.folded_bias.setdefault(root, next(t for t in node.inputs if t != src))
    layer_of: dict[str, int] = {}
    for node in graph.nodes:
        if node.name in fused:  # rides in its producer's output path: same layer, free
            layer = layer_of[fused[node.name]]
            builder.layer_info(layer).fused.append(node.name)
            for out in node.outputs:
                ctx.alias(out, fused_input(graph, node))
                ctx.producer_layer[out] = layer
            layer_of[node.name] = layer
            continue
        if node.name in head_of:  # runs in its group's pass, lowered with the group's head
            layer = layer_of[head_of[node.name]]
            builder.layer_info(layer).fused.append(node.name)
            builder.layer_info(layer).fused.extend(node.fused)
            for out in node.outputs:
                ctx.producer_layer[out] = layer
            layer_of[node.name] = layer
            continue
        before = builder.n_layers
        ctx.node_precision = node.precision
        lower = LOWERINGS[node.op_type] if _lowerable(graph, node) else lower_free
        if all(graph.tensor(t).numel == 0 for t in node.outputs if t in graph.tensors):
            lower = lower_empty  # nothing to compute (a zero-sized axis)
        try:
            lower(ctx, node)
        except NpusimError as err:  # which layer it is, where the reason does not say
            if node.name in str(err):
                raise
            raise NpusimError(f"layer '{prefix}{node.name}' ({node.op_type}): {err}") from None
        for layer in range(before, builder.n_layers):
            info = builder.layer_info(layer)
            info.precision = info.precision or node.precision  # (a part may set its own)
            if node.origin:  # results name the op the model has (QLinearConv, not Conv)
                info.op_type = node.origin
        ctx.node_precision = None
        if node.fused and builder.n_layers > before:  # a QDQ unit's Q and DQ nodes
            builder.layer_info(builder.n_layers - 1).fused.extend(node.fused)
        layer_of[node.name] = builder.n_layers - 1
    if prefix:
        builder.prefix_names(first, prefix)
    if not missing:
        return []
    return [f"{prefix}{_model_name(graph)}: treated as free (no cycles, no data moved), results "
            "underestimate the model:\n" + "\n".join(listing)]
