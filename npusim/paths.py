"""Where the bundled presets and models live, installed or in a source checkout."""

from importlib import resources
from pathlib import Path


def configs_dir() -> Path:
    """Folder of the bundled hardware presets (`configs/` in the repository)."""
    return Path(str(resources.files("npusim.configs")))


def models_dir() -> Path:
    """Folder of the bundled ONNX models (`models/` in the repository)."""
    return Path(str(resources.files("npusim.models")))
