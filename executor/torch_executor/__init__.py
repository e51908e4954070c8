"""Torch executor: MLA decode at real dimensions on T ranks in every layout whose placement one of its
attention primitives runs (`placement_kind`: TP, CP, DP-attention, DOP, DPTP), with live switches.

Modules, one concern each: `config` (dimensions), `layers` (weights and the MLA/FFN math),
`kernels` (paged split-KV decode attention: the backend choice, Triton on CUDA, torch elsewhere),
`mla_flashinfer` (FlashInfer's FA3 MLA decode, planned per step and replayed in-graph; optional),
`placement_kind` (a layout's placement -> its attention primitive, or a one-line refusal), `kv_pages`
(slots, placement, page tables), `layouts` (TP, CP, DP-attention, DOP, DPTP), `prefill` (chunked
prefill on the real layers), `buckets` (batch buckets and the step executables per bucket),
`step_inputs` and `step_graph` (a step's fixed-shape inputs and its CUDA graph), `move_plan` (page-move
plans), `transfer` (one chunk over the side group, checksummed), `transitions` (a switch's states:
reservation, agreement, commit, probation, abort), `dist` (process groups, spawning), `runner` (the per-rank
step driver), `serving` (runtime_policy's Executor protocol over a runner), `serve` (the serving
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
