"""Engine memory models (SGLang, vLLM): how each engine sizes the KV pool and the defaults it
brings (page size, KV dtype per GPU generation, prefill chunk). One module per engine."""

from planner.engines.base import DEFAULT_ENGINE, EngineMemoryModel, MemoryPlan, engine_names, engines, register_engine
from planner.engines.kv_dtype import KV_DTYPE_MAPPING, KV_DTYPE_NAMES, resolve_kv_dtype

__all__ = ["DEFAULT_ENGINE", "KV_DTYPE_MAPPING", "KV_DTYPE_NAMES", "EngineMemoryModel", "MemoryPlan", "engine_names",
           "engines", "register_engine", "resolve_kv_dtype"]
