"""Spec factories for planner tests: small hand-made configs and deployments."""

from __future__ import annotations

import json
from pathlib import Path

import planner

MLA_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
    "intermediate_size": 2048, "moe_intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_shared_experts": 1, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "first_k_dense_replace": 1, "q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16, "v_head_dim": 32, "vocab_size": 4096,
}

GQA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096,
    "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 4096,
}

HW_YAML = """\
name: toy
peak:
  hbm_bytes: 80.0e9
  hbm_bandwidth_bytes_per_s: 2.0e12
  bf16_flops_per_s: 500.0e12
  scaleup_bandwidth_bytes_per_s_per_direction: 200.0e9
  scaleup_domain_gpus: 8
  collective_latency_s: 1.0e-5
  host_link_bandwidth_bytes_per_s: 32.0e9
"""


def write_config(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def deployment(model="deepseek-v3.2", hardware="h200", attn="tp", moe=None, gpus=8, **kw) -> planner.Deployment:
    m = planner.load_model(model)
    hw = planner.load_hardware(hardware)
    if moe is None:
        moe = "ep" if m.has_moe else "tp"
    return planner.make_deployment(m, hw, attn=attn, moe=moe, gpus=gpus, **kw)
