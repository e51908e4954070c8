"""Model specs: built-in cards and Hugging Face config.json loading, attention and MLP variants."""

from planner.models.loader import builtin_model_names, load_model, model_from_hf_config
from planner.models.spec import ModelSpec

__all__ = ["ModelSpec", "builtin_model_names", "load_model", "model_from_hf_config"]
