"""Single-device reference of the decode stack: dense per-request KV, plain softmax, fp32.

What it does: the same model as the ranks (same seeded weights, same synthetic history and
inputs) with no paging, no sharding and no collectives, for checking every layout.
What it does not do: anything fast.
"""

from __future__ import annotations

import torch

from .config import MLADims
from .kv_pages import history_rows
from .layers import (absorbed_queries, attention_output, ffn_partial, kv_latent, make_layer_weights, q_latent,
                     rms_norm, token_embeddings)


class ReferenceDecoder:
    """Whole model on one device in fp32 (or a chosen dtype)."""

    def __init__(self, dims: MLADims, seed: int = 0, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, stored_dtype: torch.dtype | None = None):
        """stored_dtype: the ranks' weight/KV dtype; values are rounded to it, then computed in dtype."""
        self.dims, self.seed, self.device, self.dtype = dims, seed, torch.device(device), dtype
        self.stored_dtype = stored_dtype or dtype
        self.layers = [make_layer_weights(dims, layer, seed, 0, dims.num_heads, 0, 1, self.device, self.stored_dtype)
                       for layer in range(dims.num_layers)]
        for lw in self.layers:
            for part in (lw.attn, lw.heads, lw.ffn):
                for name, value in vars(part).items():
                    if isinstance(value, torch.Tensor):
                        setattr(part, name, value.to(dtype))
        self.kv: dict[int, list[torch.Tensor]] = {}  # req -> per layer [n, C+R]
        self.order: list[int] = []

    def add_requests(self, lengths: dict[int, int]) -> None:
        for req, n in lengths.items():
            pos = torch.arange(n, device=self.device)
            self.kv[req] = [history_rows(req, pos, layer, self.dims.latent_dim, self.seed)
                            .to(self.stored_dtype).to(self.dtype)
                            for layer in range(self.dims.num_layers)]
            self.order.append(req)

    def seq_len(self, req: int) -> int:
        return int(self.kv[req][0].shape[0])

    def step(self, requests: list[int] | None = None) -> torch.Tensor:
        """One decode step of `requests` (default every request, in admission order). -> [B, D].
        A request added with no history and stepped n times is its prompt's prefill, token by token."""
        dims = self.dims
        order = self.order if requests is None else list(requests)
        req_t = torch.tensor(order, dtype=torch.int64)
        pos_t = torch.tensor([self.seq_len(q) for q in order], dtype=torch.int64)
        x = token_embeddings(req_t, pos_t, dims.hidden_size, self.seed).to(self.device, self.dtype)  # [B, D]
        positions = pos_t.to(self.device)
        for layer, lw in enumerate(self.layers):
            h = rms_norm(x, lw.attn.attn_norm, dims.rms_eps)
            latent = kv_latent(h, lw.attn, positions, dims)  # [B, C+R]
            q = absorbed_queries(q_latent(h, lw.attn, dims), lw.heads, positions, dims)  # [B, H, C+R]
            outs = []
            for i, req in enumerate(order):
                row = latent[i:i + 1].to(self.stored_dtype).to(self.dtype)  # as the ranks store it
                self.kv[req][layer] = torch.cat((self.kv[req][layer], row), dim=0)
                kv = self.kv[req][layer].float()  # [n, C+R]
                p = torch.softmax((q[i].float() @ kv.t()) * dims.softmax_scale, dim=-1)  # [H, n]
                outs.append(p @ kv[:, :dims.kv_lora_rank])  # [H, C]
            o = torch.stack(outs).to(self.dtype)  # [B, H, C]
            x = x + attention_output(o, lw.heads)
            x = x + ffn_partial(x, lw.ffn, dims)
        return x
