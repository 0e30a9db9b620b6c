"""Attention (multi-head and grouped-query) and ONNX Runtime contrib ops
(filled in by the transformer work; see LOWERINGS)."""

from __future__ import annotations

LOWERINGS: dict = {}
