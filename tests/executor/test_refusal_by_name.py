"""The torch executor runs MLA decode layers: a layered model with other mixers is refused in one
line naming them, never run as an MLA stack (Kimi-K3's primary attention is MLA, but 69 of its 93
layers are KDA)."""

import pytest

import planner
from executor.torch_executor.config import MLADims


@pytest.mark.parametrize("model, needle", [("kimi-k3", "kda ×69"), ("qwen3.5-397b-a17b", "gdn ×45, gqa ×15"),
                                           ("gpt-oss-120b", "sliding ×18")])
def test_a_stack_with_other_mixers_is_refused_by_name(model, needle):
    with pytest.raises(ValueError, match=needle):
        MLADims.from_model_spec(planner.load_model(model))


def test_an_mla_stack_still_loads():
    assert MLADims.from_model_spec(planner.load_model("deepseek-v3.2")).num_layers == 61
