"""Units in every key: each number a contract documents (schemas/*.schema.json) carries its unit
in its key or in the key of the object that holds it (`times_s.hbm`), or is a count on a short
list; and every number the commands print is documented (tests/agent/test_json_contracts.py
validates the documents strictly against these schemas)."""

from __future__ import annotations

import json
import re

from tests.agent.contracts import MICROBENCH, SCHEMAS, run_cli

# A word of the key's path that names a unit (words split at _ . [] *).
UNIT_WORDS = frozenset({"s", "ms", "bytes", "tokens", "gib", "mib", "flops", "pct", "fraction", "requests", "b",
                        "count", "factor", "efficiency", "alpha", "quality", "replication", "messages", "gpus",
                        "steps", "records"})
# Counts (requests, GPUs, rows …) and identifiers: numbers without a unit, on purpose.
COUNTS = frozenset({"exit_code", "gpus", "replicas", "nodes", "nodes_per_group", "ranks_per_group", "batch", "layers", "heads",
                    "num_heads", "hidden_size", "latent_dim", "kv_splittable_heads", "line", "rows", "rows_used",
                    "rows_predicted", "trained_on_rows", "folds", "seed", "steps", "decode_steps", "completed",
                    "aborted", "preemptions", "cant_decide", "requests", "max_concurrency", "compute_capability",
                    "kv_pages_per_rank", "inside", "above_sum", "below_floor", "rejected", "profile", "as_predicted",
                    "above_prediction", "below_prediction", "dp_rank", "counter_id", "launch_replicas"})
# Maps whose keys are named elsewhere with their units (reserve_terms' keys end in _mib; param_std
# is each fitted parameter's standard deviation, in that parameter's unit).
OPEN_MAPS = frozenset({"calibrate:param_std.*", "calibrate_kernel_db:summary.*", "capacity:layouts[].memory.reserve_terms.*",
                       "compare:layouts[].memory.reserve_terms.*", "floor:memory.reserve_terms.*", "microbench:summary.*",
                       "follow:served.params.*",
                       # the engine's terms: resource (hbm_bytes, flops, network_bytes, network_messages,
                       # overhead_s: each names its unit) -> component -> amount (issue 26)
                       "floor:engine_terms.*.*", "compare:layouts[].engine_terms.*.*"})


def _numbers(s: dict, path: str, defs: dict, out: list) -> None:
    if "$ref" in s:
        s = {**defs[s["$ref"].rsplit("/", 1)[-1]], **s}
    t = s.get("type")
    types = t if isinstance(t, list) else [t]
    if path and ("number" in types or "integer" in types):
        out.append(path)
    for k, sub in s.get("properties", {}).items():
        _numbers(sub, f"{path}.{k}" if path else k, defs, out)
    if isinstance(s.get("additionalProperties"), dict):
        _numbers(s["additionalProperties"], f"{path}.*", defs, out)
    if isinstance(s.get("items"), dict):
        _numbers(s["items"], f"{path}[]", defs, out)


def unitless(name: str, path: str) -> bool:
    words = set(re.split(r"[._\[\]*]+", path))
    last = path.replace("[]", "").split(".")[-1]
    return not (words & UNIT_WORDS) and last not in COUNTS and f"{name}:{path}" not in OPEN_MAPS


def test_every_number_in_every_contract_carries_a_unit_or_is_a_count():
    bad = []
    for f in sorted(SCHEMAS.glob("*.schema.json")):
        name = f.name.removesuffix(".schema.json")
        s = json.loads(f.read_text())
        paths: list[str] = []
        _numbers(s, "", s.get("$defs", {}), paths)
        bad += [f"{name}:{p}" for p in paths if unitless(name, p)]
    assert not bad, "numbers without a unit in their key: " + ", ".join(bad)


def test_the_check_catches_a_unitless_load():
    assert unitless("walls", "layouts[].order[].load") and unitless("walls", "layouts[].kv_wall")
    assert not unitless("walls", "layouts[].kv_wall_requests") and not unitless("triage", "times_s.hbm")


def test_batch_is_an_integer_in_every_contract():
    def schema(name):
        return json.loads((SCHEMAS / f"{name}.schema.json").read_text())

    for name in ("floor", "compare", "triage", "walls"):
        assert schema(name)["properties"]["batch"]["type"] == "integer", name
    assert schema("compare")["$defs"]["point"]["properties"]["batch"]["type"] == "integer"
    assert schema("regimes")["properties"]["batch"]["items"]["type"] == "integer"
    assert isinstance(run_cli(["floor", "--json"])["batch"], int)


def test_the_open_maps_name_their_units_in_their_keys():
    summary = run_cli(["microbench", "--from", str(MICROBENCH), "--json"])["summary"]
    terms = run_cli(["floor", "--json"])["memory"]["reserve_terms"]
    for key in [*summary, *terms]:
        assert set(key.split("_")) & UNIT_WORDS, key
