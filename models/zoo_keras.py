"""The zoo's Keras export: ``keras.applications.MobileNetV2`` (random weights, built from
its definition: ``weights=None`` downloads nothing) converted by tf2onnx, as a TensorFlow
user gets an ONNX file, and the same after ONNX Runtime's graph optimizer. NHWC input with
a dynamic batch (tf2onnx names that dim itself).

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
    a = p.parse_args(argv)
    import keras
    import tensorflow as tf
    import tf2onnx

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(IMAGE, IMAGE, 3), weights=None)
    analytic = zoo_cnn.macs("mobilenetv2", DIMS_BATCH, IMAGE, IMAGE)
    counted = keras_layer_macs(model) * DIMS_BATCH
    if counted != analytic:
        raise SystemExit(f"mobilenetv2 (Keras): analytic MACs {analytic} != Keras count {counted}")
    import onnxruntime

    versions = {"tensorflow": tf.__version__, "keras": keras.__version__,
                "tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__}
    manifest = zoo.Manifest([a.out, *a.publish])
    with tempfile.TemporaryDirectory(prefix="npusim-zoo-") as work:
        raw = Path(work) / "keras_mobilenetv2-tf2onnx.onnx"
        spec = (tf.TensorSpec((None, IMAGE, IMAGE, 3), tf.float32, name="input"),)
        tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(raw))
        proto = onnx.load(str(raw), load_external_data=False)
        batch = proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
        dims = {batch: DIMS_BATCH}
        optimized = Path(work) / "keras_mobilenetv2-tf2onnx-ort.onnx"
        zoo.ort_graph_optimize(raw, optimized)
        ort_opt = "onnxruntime graph optimizer, ORT_ENABLE_EXTENDED"
        for src, how in ((raw, None), (optimized, ort_opt)):
            fname = src.name
            size = zoo._save_graph_only(src, a.out / fname, fname[:-5])
            manifest.add({"file": fname, "model": "keras_mobilenetv2",
                          "description": f"keras.applications.MobileNetV2 (alpha 1.0, {IMAGE}x"
                                         f"{IMAGE}, 1000 classes), NHWC input, dynamic batch",
                          "exporter": "tf2onnx.convert.from_keras", "optimized": how,
                          "dims": dims, "macs": analytic, "macs_keras_count": counted,
                          "bytes": size, "versions": versions})
            for d in a.publish:
                shutil.copyfile(a.out / fname, d / fname)
            print(f"wrote {fname} ({size / 1e3:.0f} kB, {analytic:,} MACs at {dims})")


if __name__ == "__main__":
    main()
