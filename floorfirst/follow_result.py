"""The typed document of `floorfirst follow --json` (`FollowResult`) and the parts it is built of:
what came in, the model served, the refits, the residuals by binding resource, drift, the policy
tables and the live subscription. Built like floorfirst/results.py's documents (units in the key
names, None for an undefined number, a field's docstring is its schema key's description);
schemas/follow.schema.json is written from it by schemas/generate.py.

Does not: follow anything (integrations.follow builds the report this model types, and
cli/commands/follow.py prints it), or validate documents (tests/agent).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from floorfirst.results import Amount, Count, Document, MaybeAmount, Tally, _kw, _Part


class Records(_Part):
    """What came in and what was dropped."""

    received: Tally
    """Records (and undecodable payloads) that reached the follower."""
    accepted: Tally
    """Records priced as steps."""
    heartbeats: Tally
    """Idle heartbeats (all zeros), skipped."""
    dropped_total: Tally
    """Records dropped, all reasons."""
    dropped: dict[str, Annotated[Tally, _kw(description="Records.")]]
    """Reason → records dropped: malformed (a missing or bad field, not msgpack/JSON), not_priced (the planner
    refused the step), queue_full (a flood faster than pricing), lost_in_transport (gaps in SGLang's per-publisher
    sequence)."""
    drop_examples: dict[str, Annotated[list[Annotated[str, _kw(description="One example.")]], _kw(description="Lines.")]]
    """Reason → a few example lines."""


class ServedModel(_Part):
    """The step model being served now (the last good calibration)."""

    source: Literal["prior", "loaded", "refit"]
    """prior (the hardware file's efficiencies, before any refit), loaded (--calibration) or refit."""
    label: str
    """Where it came from, in words."""
    params: dict[str, Annotated[Amount, _kw(description="Value.")]]
    """Its parameters (calibration.artifact PARAM_NAMES): efficiencies are fractions, latencies and overheads
    seconds."""
    created_utc: str | None
    """When its calibration was made (null for the prior)."""


class ResourceResidual(_Part):
    """One binding resource."""

    steps: Tally
    """Steps it bound."""
    median_residual_fraction: float
    """Median (m − p)/p (positive: slower than predicted)."""
    p90_abs_residual_fraction: Amount
    """90th percentile of |m − p|/p."""


# binding resource → its steps' residual (measured − predicted)/predicted
Residuals = dict[str, ResourceResidual]


class Refit(_Part):
    """One refit."""

    at_steps: Tally
    """Steps accepted when it ran."""
    window_steps: Tally
    """Steps it fitted."""
    served_median_abs_pct_error: Amount
    """Median |m − p|/p of the served model on the window, percent."""
    taken: bool
    """Whether it is now served."""
    reason: str | None
    """Why it was not taken (null when taken)."""
    median_abs_pct_error: MaybeAmount
    """The refit's in-sample median error, percent (null when the fit was refused)."""
    residual_by_resource: Residuals
    """Steps each timed resource binds (its calibrated term the largest) → their residual (measured −
    predicted)/predicted."""
    fit_s: Amount
    """Seconds the fit took."""


class DriftEvent(_Part):
    """One drift step."""

    worker_id: str
    """SGLang's worker id."""
    dp_rank: Tally
    """Attention-DP rank that published it."""
    counter_id: Tally
    """Its publisher's pass counter."""
    batch: Tally
    """Decode requests, whole deployment."""
    context_tokens: Amount
    """Mean decode context, tokens."""
    prefill_tokens: Amount
    """Prefill tokens in the pass."""
    measured_s: Amount
    """SGLang's wall_time, seconds."""
    predicted_s: Amount
    """The served prediction, seconds."""
    residual_fraction: float
    """(m − p)/p."""
    resource: str
    """The resource to profile: the largest calibrated term."""
    explanation: str
    """One line, as triage --calibration says it."""


class Drift(_Part):
    """Steps slower than the served prediction by more than the margin (calibration.triage: profile the largest
    calibrated term)."""

    steps: Tally
    """Drift steps."""
    steps_by_resource: dict[str, Annotated[Tally, _kw(description="Steps.")]]
    """Resource to look at → drift steps."""
    events: list[DriftEvent]
    """The latest drift steps (at most 20)."""


class PolicyTables(_Part):
    """The runtime policy's tables compiled from the served model (runtime_policy.tables.compile_tables, in the
    background)."""

    state: Literal["off", "not compiled", "compiling", "current", "failed"]
    """off, not compiled, compiling, current or failed."""
    model: str | None
    """The step model they were compiled from (null before the first compile)."""
    compile_s: Amount | None = None
    """Seconds the last compile took."""
    layouts: list[Annotated[str, _kw(description="A layout.")]] | None = None
    """Layouts the tables index."""
    max_batch_requests: Count | None = None
    """Largest decode batch the tables cover."""
    error: str | None = None
    """Why the last compile failed."""


class Transport(_Part):
    """The live subscription (absent with --once)."""

    restart_count: Tally
    """Times a publisher's sequence went back (SGLang restarted)."""
    disconnect_count: Tally
    """Disconnects the ZMQ socket monitor saw."""
    connect_count: Tally
    """Connects the ZMQ socket monitor saw."""
    silent_s: MaybeAmount
    """Seconds since the last record (null: none came)."""
    ran_s: Amount
    """Seconds the subscription ran."""
    interrupted: bool
    """Ended by an interrupt."""


class FollowResult(Document):
    """A run of follow: SGLang forward-pass records read as measured steps of the launch line's deployment, the
    calibration refit online over a rolling window, drift (steps slower than the served prediction by more than the
    margin) named by resource, and the policy tables kept current."""

    command: ClassVar[str] = "follow"
    deployment: str
    """The deployment the launch line runs, in words."""
    engine_args: str
    """The launch line as given."""
    margin_fraction: Amount
    """Drift margin: a step slower than the served prediction by more than this fraction."""
    window_steps: Count
    """Steps a refit fits (the newest)."""
    refit_every_steps: Count
    """New steps between refits."""
    records: Records
    """What came in and what was dropped."""
    served: ServedModel
    """The step model being served now (the last good calibration)."""
    refits: list[Refit]
    """Every refit, in order."""
    residual_by_resource: Residuals
    """Residuals of the steps between the last two refits, against the model served when they arrived."""
    residual_by_resource_since_refit: Residuals
    """Residuals of the steps since the last refit."""
    median_abs_pct_error: MaybeAmount
    """Median |m − p|/p of every accepted step against the model served when it arrived, percent (null before the
    first step)."""
    drift: Drift
    """Steps slower than the served prediction by more than the margin (calibration.triage: profile the largest
    calibrated term)."""
    tables: PolicyTables
    """The runtime policy's tables compiled from the served model (runtime_policy.tables.compile_tables, in the
    background)."""
    transport: Transport | None = None
    """The live subscription (absent with --once)."""
    calibration_out: str | None
    """Where each taken refit was written (--out; null without)."""
