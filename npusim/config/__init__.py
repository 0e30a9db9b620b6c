"""Typed hardware configuration: presets, validation, overrides and ONNXim-JSON import.

    from npusim.config import load_config
    cfg = load_config("server", ["core.systolic.width=64"])
    cfg.core.systolic.width, cfg.memory.peak_gbps
"""

from npusim.config.load import (
    DEFAULT_PRESET,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    list_presets,
    load_config,
    parse_override,
)
from npusim.config.onnxim import onnxim_to_dict
from npusim.config.schema import (
    DEFAULT_VECTOR_LATENCY,
    MEMORY_TYPES,
    NOC_TYPES,
    POLICIES,
    PRECISIONS,
    VECTOR_OPS,
    CoreConfig,
    DmaConfig,
    EnergyConfig,
    ControllerConfig,
    MemoryConfig,
    NocConfig,
    NpuConfig,
    SchedulerConfig,
    SystolicConfig,
    VectorConfig,
)

__all__ = [
    "DEFAULT_PRESET", "DEFAULT_VECTOR_LATENCY", "MEMORY_TYPES", "NOC_TYPES", "POLICIES",
    "PRECISIONS", "VECTOR_OPS", "ControllerConfig", "CoreConfig", "DmaConfig", "EnergyConfig", "MemoryConfig", "NocConfig",
    "NpuConfig", "SchedulerConfig", "SystolicConfig", "VectorConfig", "apply_overrides", "config_from_dict",
    "config_to_dict", "list_presets", "load_config", "onnxim_to_dict", "parse_override",
]
