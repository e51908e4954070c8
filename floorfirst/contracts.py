"""The versions of the JSON contracts (docs/json-contracts.md): `floorfirst.<command>/<major>`.
Apart from the typed documents (floorfirst/results.py) so that the CLI reads them without
building the models.

NOTE: a contract's major version bumps when a key changes type or meaning:
capacity/2 — `mem_fraction` is the engine fraction given (null: each layout's engine default),
no longer a share of the datasheet HBM.
walls/2 — every load carries its unit in its key (`*_requests` growing batch, `*_tokens` growing
context: walls_*, at_*, kv_wall_*, range_*, loads_*), the fixed batch is an integer.
(batch became an integer in floor, compare, triage and regimes: a narrowing of number, no bump.)
"""

SCHEMA_VERSION = 1
SCHEMA_VERSIONS = {"capacity": 2, "walls": 2}


def schema_name(command: str) -> str:
    return f"floorfirst.{command}/{SCHEMA_VERSIONS.get(command, SCHEMA_VERSION)}"
