"""Executors: carry the runtime policy's decisions out, behind runtime_policy's `Executor` protocol.

- `executor.sim`: step times from the compiled step-time tables (numpy), any number of GPUs;
- `executor.torch_executor`: real MLA decode layers on T processes (torch.distributed; NCCL on
  GPUs, gloo on CPU), a paged KV cache, the four attention layouts (TP, CP, DP-attention, DOP)
  and the 12 live transitions between them; `serving.TorchExecutor` is the protocol over it and
  `serve.serve_torch` runs the serving loop on it, one process per rank. Importing `executor` does
  not import torch; only importing `executor.torch_executor` does.
- `executor.oracle`: the per-step-best bound over recorded runs.
"""
