"""DRAM standards as data (``configs/dram/``) and an independent command-log checker.

    from npusim.dram import load_standard, list_standards, check_command_log
    std = load_standard("DDR4-3200AA_8Gb_x16")
    std.timing["CL"], std.burst_bytes, std.rule_arrays()["prev_start"]
"""

from npusim.dram.checker import LOG_COLUMNS, check_command_log
from npusim.dram.standard import (
    COMMANDS,
    COMMON_TIMINGS,
    LEVELS,
    RANK_WIDE,
    DramStandard,
    Rule,
    dram_dir,
    dram_standard,
    list_standards,
    load_standard,
)

__all__ = [
    "COMMANDS", "COMMON_TIMINGS", "LEVELS", "LOG_COLUMNS", "RANK_WIDE", "DramStandard", "Rule",
    "check_command_log", "dram_dir", "dram_standard", "list_standards", "load_standard",
]
