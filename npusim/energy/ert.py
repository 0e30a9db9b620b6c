"""Import an Accelergy energy reference table (``ERT.yaml`` or ``ERT_summary.yaml``, as
Timeloop writes them) as an npusim energy table, so Timeloop users can bring theirs.

Accelergy names components by their place in the architecture
(``system.simple_ws.PE[0..255].mac``); npusim maps each by its last name (without the
instance range) to the action it prices:

=======================================  ==========================================
component (last name)                    npusim entry
=======================================  ==========================================
contains ``mac``                         ``mac.*`` (every datatype): ``mac_random``
contains ``reg`` (PE registers)          ``register.pj_per_access``: mean ``access``
contains ``acc`` (accumulator buffer)    ``accum.read_pj`` / ``accum.write_pj``
``spad``, ``glb``, ``buffer``, ``sram``  ``spad.read_pj`` / ``spad.write_pj`` (a buffer
                                         inside each PE, ``PE[..].pe_spad``, is not
                                         imported: npusim's PEs hold one weight)
``DRAM``                                 not imported: npusim prices DRAM from its
                                         standard's IDD currents
=======================================  ==========================================

A storage action with arguments takes the random access (every ``*_delta`` = 1, the largest
energy), an ``ERT_summary`` entry its ``max_energy``; an access energy is taken per access of
npusim's row (the ERT does not say its width). Every other entry is the bundled ``45nm``
table's (Accelergy's default technology), and the table's description lists what was
imported and what was left out, so nothing is dropped silently.
"""

from __future__ import annotations

import re
from pathlib import Path

from npusim.errors import NpusimError

BASE_TABLE = "45nm"


def _leaf(name: str) -> str:
    return re.sub(r"\[.*?\]", "", str(name).split(".")[-1]).lower()


def _per_pe(name: str) -> bool:
    """A component replicated per PE (``...PE[0..255].pe_spad``): its parent has a range."""
    return "[" in ".".join(str(name).split(".")[:-1])


def _role(leaf: str) -> str | None:
    if "dram" in leaf:
        return "dram"
    if "mac" in leaf:
        return "mac"
    if "reg" in leaf and "spad" not in leaf:
        return "register"
    if "acc" in leaf:
        return "accum"
    if any(k in leaf for k in ("spad", "glb", "buffer", "sram", "scratch")):
        return "spad"
    return None


def _action_energy(action: dict, where: str) -> float:
    """An action's energy: ``energy`` (ERT) or ``max_energy`` (ERT_summary, a storage
    action's random access)."""
    key = next((k for k in ("max_energy", "energy", "average_energy") if k in action), None)
    v = action.get(key) if key else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise NpusimError(f"{where}: action {action.get('name')!r} has no energy >= 0 "
                          f"(got {v!r})")
    return float(v)


def _actions(table: dict, where: str) -> dict[str, float]:
    """Energy of each action name: the random access (largest) when arguments differ."""
    out: dict[str, float] = {}
    for a in table.get("actions") or []:
        if not isinstance(a, dict) or "name" not in a:
            raise NpusimError(f"{where}: an action must have a name and an energy")
        e = _action_energy(a, where)
        out[a["name"]] = max(out.get(a["name"], 0.0), e)
    return out


def read_ert(path: Path) -> list[tuple[str, dict[str, float]]]:
    """(component name, {action: pJ}) of an ERT.yaml or ERT_summary.yaml."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise NpusimError(f"{path}: not valid YAML: {e}") from None
    if isinstance(doc, dict) and "ERT" in doc:
        tables = (doc["ERT"] or {}).get("tables")
    elif isinstance(doc, dict) and "ERT_summary" in doc:
        tables = (doc["ERT_summary"] or {}).get("table_summary")
    else:
        raise NpusimError(f"{path}: not an Accelergy energy reference table (expected a top-level "
                          f"ERT: tables or ERT_summary: table_summary)")
    if not isinstance(tables, list) or not tables:
        raise NpusimError(f"{path}: the ERT lists no components")
    out = []
    for t in tables:
        if not isinstance(t, dict) or "name" not in t:
            raise NpusimError(f"{path}: every ERT component needs a name and actions")
        out.append((str(t["name"]), _actions(t, f"{path}: component {t['name']}")))
    return out


def table_from_ert(path: Path):
    """An EnergyTable from an Accelergy ERT: mapped entries replaced, the rest from 45nm."""
    from npusim.energy.table import DATATYPES, load_energy_table

    base = load_energy_table(BASE_TABLE)
    values, sources = dict(base.values), dict(base.sources)
    imported, skipped = [], []
    regs: list[tuple[str, float]] = []
    for comp, acts in read_ert(path):
        role = _role(_leaf(comp))
        src = f"{path.name}: {comp}"
        if role == "mac" and ("mac_random" in acts or acts):
            e = acts.get("mac_random", max(acts.values()))
            for d in DATATYPES:
                values[f"mac.{d}"], sources[f"mac.{d}"] = e, f"{src} mac_random"
            imported.append(comp)
        elif role == "register" and "access" in acts:
            regs.append((comp, acts["access"]))
        elif role in ("spad", "accum") and _per_pe(comp):
            skipped.append(comp + " (a per-PE buffer: npusim's PEs hold one weight in "
                                  "registers)")
        elif role in ("spad", "accum") and ("read" in acts or "write" in acts):
            for rw in ("read", "write"):
                e = acts.get(rw, acts.get("read", acts.get("write")))
                values[f"{role}.{rw}_pj"], sources[f"{role}.{rw}_pj"] = e, f"{src} {rw}"
            imported.append(comp)
        else:
            skipped.append(comp + (" (DRAM: priced from IDD currents)" if role == "dram" else ""))
    if regs:
        values["register.pj_per_access"] = sum(e for _, e in regs) / len(regs)
        sources["register.pj_per_access"] = (f"{path.name}: mean access of "
                                             f"{', '.join(c for c, _ in regs)}")
        imported += [c for c, _ in regs]
    if not imported:
        raise NpusimError(f"{path}: no ERT component maps to an npusim action (a name containing "
                          f"mac, reg, spad/glb/buffer/sram or acc); components: "
                          f"{', '.join(c for c, _ in read_ert(path))}")
    from dataclasses import replace

    return replace(base, name=path.stem, path=str(path), values=values, sources=sources,
                   description=(f"Accelergy ERT {path.name}: imported {', '.join(imported)}; "
                                f"not imported: {', '.join(skipped) or 'nothing'}; other entries "
                                f"from the {BASE_TABLE} table"),
                   source=f"Accelergy energy reference table {path}")
