"""Disaggregated prefill and decode: two pools of one model, each with its own GPUs, layout and
engine memory, and the KV hand-off between them priced as a resource (issue 29).

- `roles`: a pool's deployment as its engine sizes it for its role (the prefill pool keeps the chunk
  activations and drops the decode CUDA graphs; the decode pool's activation reserve follows its
  running batch, not the prefill chunk), and `DisaggDeployment`, the pair;
- `handoff`: the bytes a request's KV costs on the scale-out tier, rank by rank, between the two
  pools' placements, with the messages the engines' transfer backends send and their overlap with
  prefill;
- `pools`: what one prefill instance and one decode instance sustain (prompt throughput and its walls;
  the decode floors and the KV wall), and a colocated deployment of the same GPUs;
- `search`: xPyD splits of a GPU budget against the best colocated deployment, and the best split
  as input and output lengths move;
- `launch`: the winner as SGLang and vLLM launch lines.

Pure numpy on top of the step model; imports nothing outside planner.
"""

from planner.disagg.roles import ROLES, DisaggDeployment, RoleMemory, make_role_deployment, role_memory

__all__ = ["ROLES", "DisaggDeployment", "RoleMemory", "make_role_deployment", "role_memory"]
