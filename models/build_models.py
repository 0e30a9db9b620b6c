"""Build the small ONNX models bundled with npusim.

Run ``python models/build_models.py`` to regenerate every ``models/*.onnx`` (or pass
``--out DIR`` to write elsewhere). Output is byte-for-byte deterministic: the IR version and
opset are pinned and protobuf serialisation is deterministic, and a test checks that a fresh
build equals the committed files.

The models use only onnx.helper (no torch, no downloads). Weights are initializers with a
shape and dtype but no bytes: each points at an external data file
``<model>.weights.bin`` that is deliberately never written. That keeps the files tiny and
proves the loader never reads weight data (a simulator needs shapes, not values).

Bundled models (ops limited to Conv, Gemm, MatMul, Flatten for the first lowering engine):

- tiny_cnn: [1,3,32,32] -> four Convs -> Flatten -> Gemm -> [1,10]; the quick first model
- mlp: [64,256] -> MatMul 512 -> MatMul 512 -> Gemm 128
- matmul_512x768x768: one MatMul [512,768] x [768,768] (benchmark)
- matmul_1024: one MatMul [1024,1024] x [1024,1024]
- conv_resnet18_layer1: one 3x3 Conv, 64 -> 64 channels on 56x56 (a validation case)
- bert_ffn: [seq,768] -> MatMul 3072 -> MatMul 768 with symbolic ``seq`` (needs --dim seq=N)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from onnx import ModelProto, TensorProto, ValueInfoProto, helper

IR_VERSION = 8  # pinned so the bytes do not change with the installed onnx version
OPSET = 17
FLOAT = TensorProto.FLOAT


class Weights:
    """Hands out weight initializers that live in a (never written) external data file."""

    def __init__(self, model_name: str):
        self.location = f"{model_name}.weights.bin"
        self.offset = 0
        self.tensors: list[TensorProto] = []

    def add(self, name: str, shape: list[int], dtype: int = FLOAT) -> str:
        t = TensorProto()
        t.name = name
        t.data_type = dtype
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        length = helper.tensor_dtype_to_np_dtype(dtype).itemsize
        for d in shape:
            length *= d
        for key, value in (("location", self.location), ("offset", self.offset), ("length", length)):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
        self.offset += length
        self.tensors.append(t)
        return name


def _model(name: str, doc: str, nodes, inputs, outputs, weights: Weights) -> ModelProto:
    graph = helper.make_graph(
        nodes, name, inputs, outputs, initializer=weights.tensors, doc_string=doc
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="npusim models/build_models.py",
        doc_string=doc,
    )
    return model


def _io(name: str, shape) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, FLOAT, shape)


def tiny_cnn() -> ModelProto:
    w = Weights("tiny_cnn")
    convs = [  # (name, in_ch, out_ch, kernel, stride, pad)
        ("conv1", 3, 16, 3, 1, 1),
        ("conv2", 16, 32, 3, 2, 1),
        ("conv3", 32, 32, 3, 1, 1),
        ("conv4", 32, 64, 1, 1, 0),
    ]
    nodes, x = [], "input"
    for name, cin, cout, k, s, p in convs:
        wt = w.add(f"{name}.weight", [cout, cin, k, k])
        b = w.add(f"{name}.bias", [cout])
        nodes.append(
            helper.make_node(
                "Conv", [x, wt, b], [f"{name}.out"], name=name,
                kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], group=1,
            )
        )
        x = f"{name}.out"
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    fc_w = w.add("fc.weight", [10, 64 * 16 * 16])
    fc_b = w.add("fc.bias", [10])
    nodes.append(
        helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1)
    )
    doc = ("Tiny CNN for a quick first simulation: [1,3,32,32] -> Conv 3->16 3x3 -> "
           "Conv 16->32 3x3/2 -> Conv 32->32 3x3 -> Conv 32->64 1x1 -> Flatten -> "
           "Gemm 16384->10. Weights are shapes only (external file never written).")
    return _model("tiny_cnn", doc, nodes, [_io("input", [1, 3, 32, 32])],
                  [_io("logits", [1, 10])], w)


def mlp() -> ModelProto:
    w = Weights("mlp")
    nodes = [
        helper.make_node("MatMul", ["input", w.add("fc1.weight", [256, 512])], ["h1"], name="fc1"),
        helper.make_node("MatMul", ["h1", w.add("fc2.weight", [512, 512])], ["h2"], name="fc2"),
        helper.make_node(
            "Gemm", ["h2", w.add("fc3.weight", [128, 512]), w.add("fc3.bias", [128])],
            ["output"], name="fc3", transB=1,
        ),
    ]
    doc = ("Three-layer MLP on a batch of 64: [64,256] -> MatMul 512 -> MatMul 512 -> "
           "Gemm 128 (transB, bias). Weights are shapes only.")
    return _model("mlp", doc, nodes, [_io("input", [64, 256])], [_io("output", [64, 128])], w)


def _single_matmul(name: str, m: int, k: int, n: int, doc: str) -> ModelProto:
    w = Weights(name)
    node = helper.make_node("MatMul", ["A", w.add("B", [k, n])], ["C"], name="matmul")
    return _model(name, doc, [node], [_io("A", [m, k])], [_io("C", [m, n])], w)


def matmul_512x768x768() -> ModelProto:
    return _single_matmul(
        "matmul_512x768x768", 512, 768, 768,
        "Benchmark: one MatMul [512,768] x [768,768] (weight is an initializer, shape only).",
    )


def matmul_1024() -> ModelProto:
    return _single_matmul(
        "matmul_1024", 1024, 1024, 1024,
        "One MatMul [1024,1024] x [1024,1024] (weight is an initializer, shape only).",
    )


def conv_resnet18_layer1() -> ModelProto:
    w = Weights("conv_resnet18_layer1")
    node = helper.make_node(
        "Conv", ["input", w.add("conv.weight", [64, 64, 3, 3])], ["output"], name="conv",
        kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], group=1,
    )
    doc = ("One ResNet-18 layer1 convolution: [1,64,56,56], 64 filters 3x3, stride 1, pad 1, "
           "no bias -> [1,64,56,56]. Matches a validation case. Weights are shapes only.")
    return _model("conv_resnet18_layer1", doc, [node], [_io("input", [1, 64, 56, 56])],
                  [_io("output", [1, 64, 56, 56])], w)


def bert_ffn() -> ModelProto:
    w = Weights("bert_ffn")
    nodes = [
        helper.make_node("MatMul", ["input", w.add("ffn.w1", [768, 3072])], ["hidden"], name="ffn_up"),
        helper.make_node("MatMul", ["hidden", w.add("ffn.w2", [3072, 768])], ["output"], name="ffn_down"),
    ]
    doc = ("BERT-base feed-forward block without activation: [seq,768] -> MatMul 3072 -> "
           "MatMul 768. 'seq' is symbolic: bind it with --dim seq=N. Weights are shapes only.")
    return _model("bert_ffn", doc, nodes, [_io("input", ["seq", 768])],
                  [_io("output", ["seq", 768])], w)


MODELS = {
    "tiny_cnn": tiny_cnn,
    "mlp": mlp,
    "matmul_512x768x768": matmul_512x768x768,
    "matmul_1024": matmul_1024,
    "conv_resnet18_layer1": conv_resnet18_layer1,
    "bert_ffn": bert_ffn,
}


def build_all(out_dir: str | Path) -> list[Path]:
    """Write every bundled model into ``out_dir``; returns the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in MODELS.items():
        path = out / f"{name}.onnx"
        path.write_bytes(build().SerializeToString(deterministic=True))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent),
                        help="folder to write the .onnx files into (default: models/)")
    args = parser.parse_args()
    for path in build_all(args.out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
