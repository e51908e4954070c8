"""One decode step as a CUDA graph: captured once per fixed-shape input set, replayed every step.

What it does: `StepExec` pairs a `StepInputs` (one batch bucket of one layout state) with the
function that runs the step on them. On CUDA (when enabled) `prepare()` runs the step once eagerly
on dry inputs (every row padding, every write aimed at the trash slot: compiles Triton kernels
for these shapes, warms cuBLAS and the communicators), captures it in a graph on a capture stream
(NCCL collectives included; capture error mode thread-local so the process group's watchdog
thread may query events meanwhile; into the memory pool the caller shares between the graphs of
one layout, as vLLM and SGLang share one pool across their batch sizes), and replays it once
more, dry, so the graph is uploaded before it is timed or committed to. `run()` is then one
replay on the current stream of whatever batch `StepInputs.fill` wrote; `run_eager(...)` calls
the function eagerly (a step that also runs a prefill chunk; CPU).
NOTE: the only device synchronize is the one before a capture (see `prepare`): a switch
prepares the destination's graphs during its copying phase, between steps, while the device is
still busy with earlier steps and background transfers; the serving loop's steps never wait.
A kernel that plans on the host (FlashInfer's, `KernelInputs.kernel`) is planned by `StepInputs.fill`,
which precedes every eager call and every replay here and never runs inside a capture: the
captured launch reads the plan's reserved device buffers, refilled before each replay.
What it does not do: choose the bucket (buckets.py) or decide when to capture (runner.py).
"""

from __future__ import annotations

from typing import Callable

import torch

from .step_inputs import StepInputs


class StepExec:
    """A step function bound to static inputs; a CUDA graph of it once prepared."""

    def __init__(self, inputs: StepInputs, fn: Callable[..., torch.Tensor], use_graph: bool, pool=None):
        self.inputs, self.fn, self.pool = inputs, fn, pool
        self.use_graph = use_graph and inputs.device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.capture_error: str | None = None
        self.prepared = not self.use_graph

    def prepare(self) -> bool:
        """Warm up and capture (CUDA graphs only); True when a graph was captured now. Every rank
        must call this at the same point (the warm-up and the capture run the step's collectives)."""
        if self.prepared:
            return False
        self.prepared = True
        self.inputs.fill_dry()
        self.fn(self.inputs)  # eager warm-up on the main stream
        # NOTE: capture with no collective still pending: NCCL refused a capture while the eager
        # warm-up's collectives waited on a peer (H200 x2, torch 2.11, NCCL 2.28). This waits for
        # the device once per bucket: at start-up, or during a switch's copying phase.
        torch.cuda.synchronize(self.inputs.device)
        main = torch.cuda.current_stream(self.inputs.device)
        cap = torch.cuda.Stream(device=self.inputs.device)
        cap.wait_stream(main)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(cap):
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    out = self.fn(self.inputs)
                finally:
                    graph.capture_end()
        except RuntimeError as e:  # stay eager: the same collectives in the same order as a replay
            self.capture_error = repr(e)[:300]
            self.use_graph = False
            main.wait_stream(cap)
            return False
        main.wait_stream(cap)
        self.graph, self.out = graph, out
        self.inputs.fill_dry()
        graph.replay()  # dry replay: uploads the graph to the device
        return True

    def run(self) -> torch.Tensor:
        """The step on the values last filled. With a graph the result is the graph's static output
        tensor, overwritten by the next replay of any graph of the pool (clone it to keep it)."""
        if self.graph is None:
            return self.fn(self.inputs)
        self.graph.replay()
        return self.out

    def run_eager(self, *extra) -> torch.Tensor:
        """The step function called eagerly on the values last filled, with extra arguments."""
        return self.fn(self.inputs, *extra)
