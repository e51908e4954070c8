"""A disaggregated deployment as SGLang and vLLM launch lines.

The parallel flags come from each pool's placement (planner/layouts/placement.py), never from a
layout's name, as planner.launch reads them back (tests round-trip every line through
`planner.launch.parse_launch`):
- one owner group, KV split by heads, weights over the group → SGLang `--tp-size T`; vLLM
  `--tensor-parallel-size T`;
- one owner group, KV interleaved by tokens over it → SGLang `--tp-size T --dcp-size T`; vLLM
  `-tp T -dcp T`;
- G owner groups of R ranks, weights split inside each group and replicated across → SGLang
  `--tp-size T --dp-size G --enable-dp-attention`; vLLM `--data-parallel-size G
  --tensor-parallel-size R` (a MoE model: one engine core per DP rank);
- anything else (DOP's weights over all T with KV on one owner, SPLASH's CP with replicated
  weights) has no engine flag: `launchable` is None.
The MoE split: expert parallel over the group → SGLang `--ep-size T`, vLLM `--enable-expert-parallel`.

Disaggregation flags, read in the engines' docs and code:
- SGLang (docs/advanced_features/pd_disaggregation.md; server_args `disaggregation_mode`,
  `disaggregation_transfer_backend` default mooncake, `disaggregation_ib_device`): each instance
  `--disaggregation-mode prefill|decode --disaggregation-transfer-backend mooncake
  --disaggregation-ib-device <NICs>`, multi-node instances `--nnodes N --node-rank i
  --dist-init-addr <first node>:5000`; the router `python -m sglang_router.launch_router
  --pd-disaggregation --prefill http://P:30000 … --decode http://D:30001 …`.
- vLLM (docs/features/nixl_connector_usage.md): every instance `--kv-transfer-config
  '{"kv_connector":"NixlConnector","kv_role":"kv_producer"|"kv_consumer"}'` with
  `VLLM_NIXL_SIDE_CHANNEL_HOST`/`PORT` in its environment ("NixlConnector currently does not
  distinguish kv_role; the actual prefiller/decoder roles are determined by the upper-level proxy"),
  and a proxy (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py `--prefiller-hosts …
  --decoder-hosts …`, or llm-d's router). An instance over several nodes: DP ranks with
  `--data-parallel-size-local`, `--data-parallel-address`, `--data-parallel-start-rank`
  (docs/serving/data_parallel_deployment.md), TP with `--nnodes --node-rank --master-addr`.
Hosts, ports and NIC names are placeholders (${...}); the memory each role's engine reserves is its
own default (planner.disagg.roles), so no memory flag is printed.

Does not: start anything.
"""

from __future__ import annotations

import json

from planner.deployment import Deployment

SGLANG_PORTS = {"prefill": 30000, "decode": 30001}
VLLM_PORTS = {"prefill": 8100, "decode": 8200}
VLLM_SIDE_CHANNEL_PORT = 5600  # docs/features/nixl_connector_usage.md VLLM_NIXL_SIDE_CHANNEL_PORT default
DIST_INIT_PORT = 5000


def launchable(dep: Deployment, engine: str) -> list[str] | None:
    """The engine's parallel flags for `dep` (module docstring); None when no flag runs its layout."""
    pl, t = dep.placement, dep.ranks
    g, r = pl.owner_groups, pl.group_ranks
    ep = dep.moe == "ep" and dep.model.has_moe
    if engine == "sglang":
        moe = [f"--ep-size {t}"] if ep else []
        if g == 1 and pl.weight_split == t and pl.token_split == 1:
            return [f"--tp-size {t}", *moe]
        if g == 1 and pl.weight_split == t and pl.token_split == t:
            return [f"--tp-size {t}", f"--dcp-size {t}", *moe]
        if g > 1 and pl.attention_dp_size == g:
            return [f"--tp-size {t}", f"--dp-size {g}", "--enable-dp-attention", *moe]
        return None
    if engine == "vllm":
        moe = ["--enable-expert-parallel"] if ep else []
        if g == 1 and pl.weight_split == t and pl.token_split == 1:
            return [f"--tensor-parallel-size {t}", *moe]
        if g == 1 and pl.weight_split == t and pl.token_split == t:
            return [f"--tensor-parallel-size {t}", f"--decode-context-parallel-size {t}", *moe]
        if g > 1 and pl.attention_dp_size == g and dep.model.has_moe:
            return [f"--data-parallel-size {g}", f"--tensor-parallel-size {r}", *moe]
        return None
    return None


def model_path(dep: Deployment) -> str:
    """The repository the model's card was taken from (planner/models/card_sources.json), else its name."""
    from planner.models.loader import card_sources

    src = card_sources().get(dep.model.name, {})
    return src.get("repo", dep.model.name)


def _kv_flag(dep: Deployment, engine: str) -> list[str]:
    default = dep.engine_model.default_kv_dtype(dep.model, dep.hardware)
    if dep.kv_dtype == default:
        return []
    name = {"bf16": "bfloat16", "fp8": "fp8_e4m3", "fp8_dsa": "fp8_e4m3"}[dep.kv_dtype]
    return [f"--kv-cache-dtype {name}"]


def _nodes(dep: Deployment) -> int:
    return dep.nodes


def sglang_lines(prefill: Deployment, decode: Deployment, x: int, y: int) -> list[str]:
    """One line per instance role (repeat on each instance's nodes), then the router."""
    out = []
    for role, dep, n in (("prefill", prefill, x), ("decode", decode, y)):
        flags = launchable(dep, "sglang")
        if flags is None:
            out.append(f"# {role}: SGLang has no flag for {dep.label()}")
            continue
        multi = [f"--nnodes {dep.nodes}", "--node-rank ${NODE_RANK}", f"--dist-init-addr ${{{role.upper()}_ADDR}}:{DIST_INIT_PORT}"] \
            if dep.nodes > 1 else []
        out.append(" ".join(["python -m sglang.launch_server", f"--model-path {model_path(dep)}",
                             f"--disaggregation-mode {role}", "--disaggregation-transfer-backend mooncake",
                             "--disaggregation-ib-device ${IB_DEVICE}", *flags, *_kv_flag(dep, "sglang"), *multi,
                             "--host ${HOST}", f"--port {SGLANG_PORTS[role]}", "--trust-remote-code"])
                   + f"   # × {n} instance{'s' if n > 1 else ''}")
    hosts = [f"--prefill http://${{P{i}}}:{SGLANG_PORTS['prefill']}" for i in range(x)]
    hosts += [f"--decode http://${{D{i}}}:{SGLANG_PORTS['decode']}" for i in range(y)]
    out.append(" ".join(["python -m sglang_router.launch_router --pd-disaggregation", *hosts,
                         "--host 0.0.0.0 --port 8000"]))
    return out


def vllm_lines(prefill: Deployment, decode: Deployment, x: int, y: int) -> list[str]:
    """One line per instance role, then the proxy."""
    out = []
    for role, dep, n in (("prefill", prefill, x), ("decode", decode, y)):
        flags = launchable(dep, "vllm")
        if flags is None:
            out.append(f"# {role}: vLLM has no flag for {dep.label()}")
            continue
        cfg = json.dumps({"kv_connector": "NixlConnector",
                          "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"}, separators=(",", ":"))
        multi = []
        if dep.nodes > 1 and dep.placement.owner_groups > 1:
            # docs/serving/data_parallel_deployment.md: DP ranks per node, the head's address, each node's first rank
            multi = [f"--data-parallel-size-local {dep.placement.owner_groups // dep.nodes}",
                     f"--data-parallel-address ${{{role.upper()}_ADDR}}", "--data-parallel-start-rank ${START_RANK}"]
        elif dep.nodes > 1:
            multi = [f"--nnodes {dep.nodes}", "--node-rank ${NODE_RANK}", f"--master-addr ${{{role.upper()}_ADDR}}"]
        out.append(" ".join([f"VLLM_NIXL_SIDE_CHANNEL_HOST=${{HOST}} VLLM_NIXL_SIDE_CHANNEL_PORT={VLLM_SIDE_CHANNEL_PORT}",
                             f"vllm serve {model_path(dep)}", *flags, *_kv_flag(dep, "vllm"), *multi,
                             f"--port {VLLM_PORTS[role]}", f"--kv-transfer-config '{cfg}'"])
                   + f"   # × {n} instance{'s' if n > 1 else ''}")
    out.append(" ".join(["python tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --port 8192",
                         "--prefiller-hosts", *[f"${{P{i}}}" for i in range(x)],
                         "--prefiller-ports", *[str(VLLM_PORTS["prefill"])] * x,
                         "--decoder-hosts", *[f"${{D{i}}}" for i in range(y)],
                         "--decoder-ports", *[str(VLLM_PORTS["decode"])] * y]))
    return out
