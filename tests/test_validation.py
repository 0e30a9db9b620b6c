"""Accuracy against Gemmini RTL: every case of ../shared/validation within 2%."""

import pytest

import gemmini_cases as gc
import npusim

REF = gc.load_reference()


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_within_two_percent_of_gemmini_rtl(case, tmp_path):
    model, mapping = gc.write_case(case, tmp_path)
    result = npusim.simulate(str(model), "gemmini_validation",
                             overrides=gc.case_overrides(REF, case), mapping=str(mapping))
    # the mapping file, not the heuristic, decided the tiles
    assert result.layers[0]["mapping_source"].endswith(":1")
    error = abs(result.total_cycles - case["rtl_cycles"]) / case["rtl_cycles"]
    assert error < 0.02, f"{case['name']}: npusim {result.total_cycles} vs RTL {case['rtl_cycles']}"
