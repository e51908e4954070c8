"""Torch executor: MLA decode at real dimensions in four layouts on T ranks, with live switches.

Modules, one concern each: `config` (dimensions), `layers` (weights and the MLA/FFN math),
`kernels` (paged split-KV decode attention: the backend choice, Triton on CUDA, torch elsewhere),
`mla_flashinfer` (FlashInfer's FA3 MLA decode, planned per step and replayed in-graph; optional),
`kv_pages` (slots, placement, page tables), `layouts` (TP, CP, DP-attention, DOP), `transitions` (page-move plans,
background movement, commit/abort), `dist` (process groups, spawning), `runner` (the per-rank
decode driver), `serving` (runtime_policy's Executor protocol over a runner), `serve` (the serving
loop on T ranks), `checks` and `reference` (cross-rank and single-device checks). Importing this
package imports torch.
"""

from .config import DEEPSEEK_V32, MLADims, deepseek_v32, tiny_dims
from .kernels import KernelConfig, merge_partials, mla_decode, mla_decode_torch
from .runner import RankRunner
from .transitions import Faults, PageMovePlan, SwitchState, plan_page_moves

__all__ = [
    "DEEPSEEK_V32", "MLADims", "deepseek_v32", "tiny_dims", "KernelConfig", "merge_partials", "mla_decode",
    "mla_decode_torch", "RankRunner", "Faults", "PageMovePlan", "SwitchState", "plan_page_moves",
]
