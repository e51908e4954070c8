"""Attention layouts (tp, cp, dcp, dp, dop) and MoE splits (ep, tp): busiest-rank loads and collectives."""

from planner.layouts.base import attention_layouts, moe_splits

__all__ = ["attention_layouts", "moe_splits"]
