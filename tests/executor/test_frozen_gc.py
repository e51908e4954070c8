"""The torch executor serves with the objects alive after warm-up frozen out of Python's collector
(serve.frozen_gc: vLLM's freeze_gc_heap, SGLang's freeze_gc), and leaves the collector as it found it."""

import gc

from executor.torch_executor.serve import frozen_gc
from executor.torch_executor.serving import TorchServeOptions


def test_serving_freezes_the_start_up_heap_and_unfreezes_after():
    assert TorchServeOptions().freeze_gc
    keep = [object() for _ in range(100)]
    before = gc.get_freeze_count()
    with frozen_gc(True):
        assert gc.get_freeze_count() >= before + len(keep)
    assert gc.get_freeze_count() == before
    with frozen_gc(False):
        assert gc.get_freeze_count() == before
