"""Element-wise, activation, normalization, reduction, pooling and data-moving ops on the
vector unit (filled in by the op-coverage work; see LOWERINGS)."""

from __future__ import annotations

LOWERINGS: dict = {}
