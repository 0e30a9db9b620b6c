"""The zoo's Keras export: ``keras.applications.MobileNetV2`` (random weights, built from
its definition: ``weights=None`` downloads nothing) converted by tf2onnx, as a TensorFlow
user gets an ONNX file, and the same after ONNX Runtime's graph optimizer. NHWC input with
a dynamic batch (tf2onnx names that dim itself).

Also two Keras RNNs (``--only rnn``): an LSTM, which tf2onnx writes as ONNX LSTM ops, and a
GRU, which it writes as a Loop over the time steps (npusim unrolls it).

Run in an environment with TensorFlow, tf2onnx and ONNX Runtime (they need no torch):
``pip install tensorflow-cpu tf2onnx onnxruntime && python models/zoo_keras.py``. It adds
its files to ``tests/data/zoo/manifest.json`` (``--publish DIR`` copies there too).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_zoo as zoo  # noqa: E402
import zoo_cnn  # noqa: E402

IMAGE = 96  # Keras' MobileNetV2 takes 96..224; the smallest keeps the test quick
DIMS_BATCH = 1
RNN_STEPS, RNN_INPUT, RNN_HIDDEN = 16, 128, 256  # as models/zoo_families.build_rnn


def keras_rnn(kind: str, bidirectional: bool = False, layers: int = 2):
    """``layers`` Keras ``kind`` layers (LSTM, GRU; Keras' GRU is ``reset_after``) of
    RNN_HIDDEN over RNN_STEPS steps of RNN_INPUT features, every step's output through
    Dense(10): the shapes of ``zoo_families.build_rnn``, so ``rnn_macs`` counts both."""
    import keras

    L = keras.layers
    x = inp = keras.Input((RNN_STEPS, RNN_INPUT))
    for _ in range(layers):
        cell = getattr(L, kind)(RNN_HIDDEN, return_sequences=True)
        x = L.Bidirectional(cell)(x) if bidirectional else cell(x)
    return keras.Model(inp, L.Dense(10)(x))


def rnn_entries():
    """(name, model builder, MACs, how they are counted) of the zoo's Keras RNNs."""
    import zoo_families as f

    d = {"batch_size": DIMS_BATCH, "sequence_length": RNN_STEPS}
    lstm = f.rnn_macs("LSTM", d)
    # tf2onnx writes the GRU as a Loop over the steps, which npusim unrolls; the first
    # step's recurrent product (zero state x weights) is then a constant subgraph, folded
    first = 2 * DIMS_BATCH * RNN_HIDDEN * 3 * RNN_HIDDEN
    return [("keras_lstm", lambda: keras_rnn("LSTM"), lstm,
             "formula (zoo_families.rnn_macs): tf2onnx writes ONNX LSTM ops"),
            ("keras_gru", lambda: keras_rnn("GRU"), f.rnn_macs("GRU", d) - first,
             "formula (zoo_families.rnn_macs) less each layer's first recurrent product: "
             "tf2onnx writes a Loop, unrolled by npusim, whose first step multiplies the "
             "constant zero state (a folded constant subgraph)")]


def keras_layer_macs(model) -> int:
    """Independent count from the built Keras model: every Conv2D, DepthwiseConv2D and
    Dense layer's output size times its kernel's reduction (batch 1)."""
    import keras

    total = 0
    for layer in model.layers:
        out = layer.output.shape
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            kh, kw, _, _mult = layer.kernel.shape
            total += out[1] * out[2] * out[3] * kh * kw
        elif isinstance(layer, keras.layers.Conv2D):
            kh, kw, cin, cout = layer.kernel.shape
            total += out[1] * out[2] * cout * cin * kh * kw
        elif isinstance(layer, keras.layers.Dense):
            total += int(layer.kernel.shape[0]) * int(layer.kernel.shape[1])
    return int(total)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=zoo.ZOO_DIR)
    p.add_argument("--publish", type=Path, action="append", default=[])
    p.add_argument("--only", choices=("mobilenetv2", "rnn"), help="one part only")
    a = p.parse_args(argv)
    import keras
    import onnxruntime
    import tensorflow as tf
    import tf2onnx

    versions = {"tensorflow": tf.__version__, "keras": keras.__version__,
                "tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__}
    manifest = zoo.Manifest([a.out, *a.publish])
    if a.only != "rnn":
        export_mobilenetv2(a, manifest, versions)
    if a.only != "mobilenetv2":
        export_rnns(a, manifest, versions)


def _write(a, manifest, raw: Path, record: dict) -> None:
    """``raw`` and its ONNX Runtime-optimized copy, graph-only, with their records."""
    optimized = raw.with_name(raw.stem + "-ort.onnx")
    zoo.ort_graph_optimize(raw, optimized)
    for src, how in ((raw, None), (optimized, "onnxruntime graph optimizer, "
                                              "ORT_ENABLE_EXTENDED")):
        fname = src.name
        size = zoo._save_graph_only(src, a.out / fname, fname[:-5])
        manifest.add({**record, "file": fname, "optimized": how, "bytes": size})
        for d in a.publish:
            shutil.copyfile(a.out / fname, d / fname)
        print(f"wrote {fname} ({size / 1e3:.0f} kB, {record['macs']:,} MACs)")


def _convert(model, shape, path: Path) -> dict:
    """tf2onnx's conversion of ``model`` at opset 17 with a dynamic batch; its dims."""
    import tensorflow as tf
    import tf2onnx

    spec = (tf.TensorSpec((None,) + tuple(shape), tf.float32, name="input"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(path))
    proto = onnx.load(str(path), load_external_data=False)
    return {proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param: DIMS_BATCH}


def export_rnns(a, manifest, versions) -> None:
    import keras

    for name, build, macs, how in rnn_entries():
        keras.utils.set_random_seed(0)
        with tempfile.TemporaryDirectory(prefix="npusim-zoo-") as work:
            raw = Path(work) / f"{name}-tf2onnx.onnx"
            dims = _convert(build(), (RNN_STEPS, RNN_INPUT), raw)
            _write(a, manifest, raw, {
                "model": name, "description": f"Keras {name[6:].upper()}, 2 layers, input "
                f"{RNN_INPUT}, hidden {RNN_HIDDEN}, {RNN_STEPS} steps, + Dense(10), dynamic "
                "batch", "exporter": "tf2onnx.convert.from_keras", "dims": dims,
                "macs": macs, "macs_source": how, "versions": versions})


def export_mobilenetv2(a, manifest, versions) -> None:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(IMAGE, IMAGE, 3), weights=None)
    analytic = zoo_cnn.macs("mobilenetv2", DIMS_BATCH, IMAGE, IMAGE)
    counted = keras_layer_macs(model) * DIMS_BATCH
    if counted != analytic:
        raise SystemExit(f"mobilenetv2 (Keras): analytic MACs {analytic} != Keras count {counted}")
    with tempfile.TemporaryDirectory(prefix="npusim-zoo-") as work:
        raw = Path(work) / "keras_mobilenetv2-tf2onnx.onnx"
        dims = _convert(model, (IMAGE, IMAGE, 3), raw)
        _write(a, manifest, raw, {
            "model": "keras_mobilenetv2",
            "description": f"keras.applications.MobileNetV2 (alpha 1.0, {IMAGE}x{IMAGE}, 1000 "
                           "classes), NHWC input, dynamic batch",
            "exporter": "tf2onnx.convert.from_keras", "dims": dims, "macs": analytic,
            "macs_keras_count": counted, "versions": versions})


if __name__ == "__main__":
    main()
