"""Energy and power: per-action energy tables (``configs/energy/``), DRAM energy from the
standard's IDD currents by DRAMPower's method, and the ``energy`` section of every result.

    from npusim.energy import load_energy_table, list_energy_tables
    t = load_energy_table("7nm", {"mac.int8": 0.05})
    t["mac.int8"], t.sources["mac.bf16"], t.sram_pj("spad", False, 64, 64)

README section "Energy" describes the tables, their sources and how to add one.
"""

from npusim.energy.account import ACTIONS, COMPONENTS, energy_report
from npusim.energy.dram import DRAM_COMPONENTS, dram_energy, per_action_joules
from npusim.energy.table import (
    DATATYPES,
    ENTRY_NAMES,
    EnergyTable,
    list_energy_tables,
    load_energy_table,
)

__all__ = ["ACTIONS", "COMPONENTS", "DATATYPES", "DRAM_COMPONENTS", "ENTRY_NAMES", "EnergyTable",
           "dram_energy", "energy_report", "list_energy_tables", "load_energy_table",
           "per_action_joules"]
