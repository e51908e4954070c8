"""Price every row of a profile with the planner: rows → deployments → the steps each row stands
for → one vectorized `step_cost` per deployment → the features the fit scales, the datasheet
floors and the measured times, as aligned arrays.

A step row is one step. A serving row is the steps its engine runs per output token of a request
(calibration.serving: decode steps and chunked-prefill steps, weighted), so its floors, features
and predictions are weighted sums over those steps and its measurement is the TPOT.

A row whose deployment can't be built (unknown model, a layout the model can't run…) becomes a
`RowIssue` naming its line; the other rows go on. A relative model or hardware path is tried as
given, then relative to the profile file's folder.

Does not: fit, or change any spec (costs are priced on the datasheet).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import planner
from calibration.artifact import DatasheetRates, RowFeatures, StepFeatures, step_features
from calibration.schema import LoadedRow, Profile, RowIssue
from calibration.serving import row_queue, serving_steps
from planner.errors import SpecError
from planner.resources.vector import TIMED_RESOURCES

DEFAULT_ENGINE = "sglang"


@dataclass(frozen=True)
class CostGroup:
    """Rows of one deployment, priced together."""

    key: tuple
    label: str
    cost: "planner.StepCost"  # one entry per step of these rows
    index: np.ndarray  # positions of the rows in ProfileCosts' row arrays


@dataclass(frozen=True)
class ProfileCosts:
    rows: list[LoadedRow]
    features: RowFeatures
    measured_s: np.ndarray  # [R]
    floor_max_s: np.ndarray  # [R] Σ weight · step floor_max
    floor_sum_s: np.ndarray  # [R]
    datasheet_times_s: np.ndarray  # [resources, rows] in planner.TIMED_RESOURCES order
    groups: list[CostGroup]
    rates: dict[str, DatasheetRates]  # hardware name -> its datasheet rates
    hardware: np.ndarray  # [R] hardware name per row
    issues: list[RowIssue]
    labels: np.ndarray | None = None  # [R] deployment label per row

    @property
    def size(self) -> int:
        return len(self.rows)

    def take(self, idx) -> "ProfileCosts":
        """A subset of rows (for cross-validation); groups are not carried."""
        idx = np.asarray(idx, dtype=np.int64)
        return ProfileCosts([self.rows[i] for i in idx], self.features.take(idx), self.measured_s[idx],
                            self.floor_max_s[idx], self.floor_sum_s[idx], self.datasheet_times_s[:, idx], [],
                            self.rates, self.hardware[idx], self.issues,
                            None if self.labels is None else self.labels[idx])


def _resolve(name: str, source: str) -> str:
    """A relative path as given, else relative to the profile's folder or any folder above it
    (profiles under a repository name files relative to its root)."""
    if Path(name).is_absolute() or Path(name).exists():
        return name
    for folder in Path(source).resolve().parents:
        alt = folder / name
        if alt.exists():
            return str(alt)
    return name


def rates_for(hw) -> DatasheetRates:
    p = planner.Pricing.datasheet(hw)
    return DatasheetRates(hardware=hw.name, hbm_bytes_per_s=p.hbm_bytes_per_s, flops_per_s=dict(p.flops_per_s),
                          link_bytes_per_s=p.link_bytes_per_s)


def engine_of(lr: LoadedRow) -> str:
    """The engine whose scheduler, memory and kernels a row is priced with: the row's `engine` (a
    serving row's defaults to sglang), else the default (a step row that ran outside any engine:
    only its pool's size follows the engine, its kernels are the layout's ideal ones)."""
    return lr.row.engine or DEFAULT_ENGINE


def row_queue_of(lr: LoadedRow, dep: planner.Deployment):
    """A serving row's running batch and queue under its engine (calibration.serving.row_queue):
    what the deployment's KV pool holds at the mean context (planner capacity) and the engine's
    running-request cap over its owner groups, per deployment group."""
    from planner.capacity import max_concurrency

    s = lr.serving
    ctx = s.isl + s.osl / 2.0
    pool = float(max_concurrency(dep, [ctx])[0]) / dep.replicas
    return row_queue(s.concurrency, s.replicas, pool, dep.engine_model.scheduler(dep).running_cap)


def row_steps(lr: LoadedRow, dep: planner.Deployment) -> list[tuple[float, ...]]:
    """(batch, context, prefill tokens, prefill context, query tokens, weight, prefill groups) of
    each step a row stands for: a serving row through its engine's scheduler (calibration.serving:
    one scheduler per owner group of the placement, its chunk, separate or mixed prefill, the
    running batch the pool and the cap allow)."""
    s = lr.serving
    if s is None:
        r = lr.row
        return [(float(r.batch), r.context, r.prefill_tokens, 0.0, 1.0, 1.0, 1.0)]
    engine = engine_of(lr)
    spec = dep.engine_model.scheduler(dep)
    chunk = spec.per_group_chunk(s.chunk_tokens) if s.chunk_tokens else spec.chunk_tokens_per_group
    rq = row_queue_of(lr, dep)
    kinds = serving_steps(s.isl, s.osl, s.concurrency, s.replicas, engine, chunk, s.spec_tokens, s.accept_len or 1.0,
                          groups=spec.owner_groups, running=rq.running, mode=spec.prefill_mode)
    return [(k.batch, k.context, k.prefill_tokens, k.prefill_context, k.query_tokens, k.weight, k.prefill_groups)
            for k in kinds]


def _price_group(rows: list[LoadedRow], first: LoadedRow):
    r = first.row
    model = planner.load_model(_resolve(r.model, first.source))
    hw = planner.load_hardware(_resolve(r.hardware, first.source))
    if r.num_layers is not None and r.num_layers != model.num_layers:
        # NOTE: pricing a reduced stack as the full model would put every row far below its
        # floor; refuse it with the fix instead.
        raise SpecError(f"the row ran num_layers={r.num_layers} but model {r.model} has {model.num_layers}: "
                        "name a config.json of the stack that ran")
    # NOTE: the row's engine prices its steps with that engine's kernels (planner.engines.kernels); a
    # step row that names none ran outside any engine (floorfirst's own executor): its kernels are
    # the layout's ideal ones, its memory the default engine's
    dep = planner.make_deployment(model, hw, attn=r.attn, moe=r.moe, gpus=r.gpus, replicas=r.replicas,
                                  weight_dtype=r.weight_dtype, kv_dtype=r.kv_dtype, attention_kernel=r.attention_kernel,
                                  nodes=r.nodes, engine=r.engine or DEFAULT_ENGINE, engine_kernels=r.engine is not None)
    steps, owner = [], []
    for j, lr in enumerate(rows):
        for st in row_steps(lr, dep):
            steps.append(st)
            owner.append(j)
    a = np.array(steps, dtype=np.float64)  # [S, 7]
    load = planner.DecodeLoad.equal(np.round(a[:, 0]), a[:, 1])
    cost = planner.step_cost(dep, load, prefill_tokens=a[:, 2], prefill_context=a[:, 3], query_tokens=a[:, 4],
                             prefill_groups=a[:, 6])
    return dep, hw, cost, np.array(owner, dtype=np.int64), a[:, 5]


def price_profile(profile: Profile) -> ProfileCosts:
    """Group rows by deployment and price each group's steps in one call."""
    by_key: dict[tuple, list[int]] = {}
    for i, lr in enumerate(profile.rows):
        by_key.setdefault(lr.row.deployment_key(), []).append(i)  # the engine is in the key
    issues: list[RowIssue] = []
    kept: list[LoadedRow] = []
    feats, meas, hw_names, labels, groups = [], [], [], [], []
    fmax, fsum, times = [], [], []
    rates: dict[str, DatasheetRates] = {}
    for key, idx in by_key.items():
        rows = [profile.rows[i] for i in idx]
        try:
            dep, hw, cost, owner, weight = _price_group(rows, rows[0])
            rt = rates.setdefault(hw.name, rates_for(hw))
            rf = RowFeatures(step_features(cost, rt), owner, weight, len(rows))
        except SpecError as exc:
            issues += [RowIssue(lr.source, lr.line, str(exc)) for lr in rows]
            continue
        start = len(kept)
        kept += rows
        feats.append(rf)
        meas.append(np.array([lr.row.step_ms for lr in rows]) / 1e3)
        fmax.append(rf.sum_rows(cost.floor_max_s))
        fsum.append(rf.sum_rows(cost.floor_sum_s))
        times.append(rf.sum_rows(cost.times.stacked()))
        hw_names += [hw.name] * len(rows)
        # NOTE: a card name is the label as given (Path('deepseek-v3.2').stem is 'deepseek-v3'); a config
        # path is named by its file
        name = rows[0].row.model
        label = f"{Path(name).stem if name.endswith('.json') else name} {hw.name} {dep.label()}"
        labels += [label] * len(rows)
        groups.append(CostGroup(key, label, cost, np.arange(start, start + len(rows))))
    if not kept:
        empty = StepFeatures(*(np.zeros(0) for _ in StepFeatures.__dataclass_fields__))
        return ProfileCosts([], RowFeatures.one_step_per_row(empty), np.zeros(0), np.zeros(0), np.zeros(0),
                            np.zeros((len(TIMED_RESOURCES), 0)), [], rates, np.zeros(0, dtype=object), issues, np.zeros(0, dtype=object))
    return ProfileCosts(kept, RowFeatures.concat(feats), np.concatenate(meas), np.concatenate(fmax),
                        np.concatenate(fsum), np.concatenate(times, axis=1), groups, rates,
                        np.array(hw_names, dtype=object), issues, np.array(labels, dtype=object))
