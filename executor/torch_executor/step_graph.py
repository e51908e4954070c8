"""One decode step as a CUDA graph: capture once per fixed-shape input set, replay each step.

What it does: `StepExec` pairs a `StepInputs` with the function that runs the step on them.
On CUDA (when enabled) `prepare()` runs the step once eagerly with every cache write aimed at
the trash slot (compiles Triton kernels for these shapes, warms cuBLAS and the communicators),
captures it in a graph on a capture stream (NCCL collectives included; capture error mode
thread-local so the process group's watchdog thread may query events meanwhile), and replays it
once more, dry, so the graph is uploaded before it is timed or committed to. `run()` is then one
replay on the current stream; elsewhere it calls the function eagerly.
NOTE: no device synchronize anywhere here (torch.cuda.graph's context manager would do one):
a switch prepares the destination's graph during its copying phase, between steps, while the
device is still busy with earlier steps and background transfers.
A kernel that plans on the host (FlashInfer's, `KernelInputs.kernel`) is planned by `StepInputs.upload`,
which precedes every eager call and every replay here and never runs inside a capture: the
captured launch reads the plan's reserved device buffers, refilled before each replay.
What it does not do: decide when to rebuild (runner.py), or share memory pools between graphs.
"""

from __future__ import annotations

from typing import Callable

import torch

from .step_inputs import StepInputs


class StepExec:
    """A step function bound to static inputs; a CUDA graph of it once prepared."""

    def __init__(self, inputs: StepInputs, fn: Callable[[StepInputs], torch.Tensor], use_graph: bool):
        self.inputs, self.fn = inputs, fn
        self.use_graph = use_graph and inputs.device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.capture_error: str | None = None

    def prepare(self, seq_lens: dict[int, int]) -> None:
        """Warm up and capture (CUDA graphs only). Every rank must call this at the same point."""
        if not self.use_graph or self.graph is not None:
            return
        self.inputs.upload(seq_lens, [], [])  # dry: all writes go to the trash slot
        self.fn(self.inputs)  # eager warm-up on the main stream
        # NOTE: capture with no collective still pending: NCCL refused a capture while the eager
        # warm-up's collectives waited on a peer (H200 x2, torch 2.11, NCCL 2.28). This waits for
        # the device once, during a switch's copying phase or a batch change, never at a commit.
        torch.cuda.synchronize(self.inputs.device)
        main = torch.cuda.current_stream(self.inputs.device)
        cap = torch.cuda.Stream(device=self.inputs.device)
        cap.wait_stream(main)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(cap):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    out = self.fn(self.inputs)
                finally:
                    graph.capture_end()
        except RuntimeError as e:  # stay eager: the same collectives in the same order as a replay
            self.capture_error = repr(e)[:300]
            self.use_graph = False
            self.inputs.upload(seq_lens, [], [])
            self.fn(self.inputs)
            return
        main.wait_stream(cap)
        self.graph, self.out = graph, out
        self.inputs.upload(seq_lens, [], [])
        graph.replay()  # dry replay: uploads the graph to the device

    def run(self) -> torch.Tensor:
        """The step on the values last uploaded. With a graph the result is the graph's static
        output tensor, overwritten by the next replay (clone it to keep it)."""
        if self.graph is None:
            return self.fn(self.inputs)
        self.graph.replay()
        return self.out
