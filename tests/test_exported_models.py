"""Models exported by real frameworks load and simulate.

These tests build their ONNX files with the exporters themselves, so they run only where
the exporter packages are installed (torch; transformers for the Hugging Face model) and
are skipped elsewhere; the bundled models cover the same ops without them.
"""

import pytest

import npusim


def _tiny_cnn():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()


def _expected_macs():
    return (32 * 32 * 16 * 3 * 9) + (16 * 16 * 32 * 16 * 9) + 32 * 10


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_torch_exported_cnn_simulates(tmp_path, dynamo):
    torch = pytest.importorskip("torch")
    model = _tiny_cnn()
    path = tmp_path / "cnn.onnx"
    x = torch.randn(1, 3, 32, 32)
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=dynamo, opset_version=17)
    except Exception as e:  # an exporter backend missing here (e.g. onnxscript)
        pytest.skip(f"torch.onnx.export(dynamo={dynamo}) unavailable: {e}")
    r = npusim.simulate(str(path), "mobile")
    assert r.total_cycles > 0
    # BatchNorm folds into the conv (exporter or npusim), everything else costs its MACs
    assert sum(l["macs"] for l in r.layers) == _expected_macs()


def test_hugging_face_bert_layer_simulates(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100)
    bert = transformers.BertModel(config).eval()

    class Encoder(torch.nn.Module):  # hidden states only: the exporter sees plain tensors
        def forward(self, input_ids):
            return bert(input_ids=input_ids).last_hidden_state

    ids = torch.randint(0, 100, (1, 16))
    path = tmp_path / "bert.onnx"
    try:
        with torch.no_grad():
            torch.onnx.export(Encoder().eval(), (ids,), str(path), input_names=["input_ids"],
                              opset_version=17, dynamo=True)
    except Exception as e:
        pytest.skip(f"this transformers/torch pair does not export: {e}")
    r = npusim.simulate(str(path), "mobile", unsupported="error")
    # Q, K, V, output projections and the FFN, per token: 4*h*h + 2*h*ffn
    dense = 16 * (4 * 64 * 64 + 2 * 64 * 128)
    assert sum(l["macs"] for l in r.layers) >= dense
