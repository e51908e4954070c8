"""Executors: carry the runtime policy's decisions out.

- `executor.torch_executor`: real MLA decode layers on T processes (torch.distributed; NCCL on
  GPUs, gloo on CPU), a paged KV cache, the four attention layouts (TP, CP, DP-attention, DOP)
  and the 12 live transitions between them. Importing `executor` does not import torch; only
  importing `executor.torch_executor` does.
"""
