"""Price every row of a profile with the planner: rows → deployments → one vectorized
`step_cost` per deployment → the features the fit scales, the datasheet floors and the
measured times, as aligned arrays.

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
from calibration.artifact import DatasheetRates, StepFeatures, step_features
from calibration.schema import LoadedRow, Profile, RowIssue
from planner.errors import SpecError


@dataclass(frozen=True)
class CostGroup:
    """Rows of one deployment, priced together."""

    key: tuple
    label: str
    cost: "planner.StepCost"
    index: np.ndarray  # positions in ProfileCosts' arrays


@dataclass(frozen=True)
class ProfileCosts:
    rows: list[LoadedRow]
    features: StepFeatures
    measured_s: np.ndarray
    floor_max_s: np.ndarray
    floor_sum_s: np.ndarray
    datasheet_times_s: np.ndarray  # [4, P] hbm, compute, network_bytes, network_messages
    groups: list[CostGroup]
    rates: dict[str, DatasheetRates]  # hardware name -> its datasheet rates
    hardware: np.ndarray  # [P] hardware name per row
    issues: list[RowIssue]

    @property
    def size(self) -> int:
        return len(self.rows)

    def take(self, idx) -> "ProfileCosts":
        """A subset of rows (for cross-validation); groups are not carried."""
        idx = np.asarray(idx)
        return ProfileCosts([self.rows[i] for i in idx], self.features.take(idx), self.measured_s[idx],
                            self.floor_max_s[idx], self.floor_sum_s[idx], self.datasheet_times_s[:, idx], [],
                            self.rates, self.hardware[idx], self.issues)


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


def price_profile(profile: Profile) -> ProfileCosts:
    """Group rows by deployment and price each group in one call."""
    by_key: dict[tuple, list[int]] = {}
    for i, lr in enumerate(profile.rows):
        by_key.setdefault(lr.row.deployment_key(), []).append(i)
    issues: list[RowIssue] = []
    kept: list[LoadedRow] = []
    feats, meas, fmax, fsum, times, hw_names, groups = [], [], [], [], [], [], []
    rates: dict[str, DatasheetRates] = {}
    for key, idx in by_key.items():
        first = profile.rows[idx[0]]
        r = first.row
        try:
            model = planner.load_model(_resolve(r.model, first.source))
            hw = planner.load_hardware(_resolve(r.hardware, first.source))
            if r.num_layers is not None and r.num_layers != model.num_layers:
                # NOTE: pricing a reduced stack as the full model would put every row far below its
                # floor; refuse it with the fix instead.
                raise SpecError(f"the row ran num_layers={r.num_layers} but model {r.model} has {model.num_layers}: "
                                "name a config.json of the stack that ran")
            dep = planner.make_deployment(model, hw, attn=r.attn, moe=r.moe, gpus=r.gpus, replicas=r.replicas,
                                          weight_dtype=r.weight_dtype, kv_dtype=r.kv_dtype, nodes=r.nodes)
            rows = [profile.rows[i].row for i in idx]
            load = planner.DecodeLoad.equal(np.array([x.batch for x in rows], dtype=float),
                                            np.array([x.context for x in rows], dtype=float))
            cost = planner.step_cost(dep, load, prefill_tokens=np.array([x.prefill_tokens for x in rows]))
            rt = rates.setdefault(hw.name, rates_for(hw))
            f = step_features(cost, rt)
        except SpecError as exc:
            for i in idx:
                lr = profile.rows[i]
                issues.append(RowIssue(lr.source, lr.line, str(exc)))
            continue
        start = len(kept)
        kept += [profile.rows[i] for i in idx]
        feats.append(f)
        meas.append(np.array([profile.rows[i].row.step_ms for i in idx]) / 1e3)
        fmax.append(cost.floor_max_s)
        fsum.append(cost.floor_sum_s)
        times.append(cost.times.stacked())
        hw_names += [hw.name] * len(idx)
        groups.append(CostGroup(key, f"{Path(r.model).stem} {hw.name} {dep.label()}", cost,
                                np.arange(start, start + len(idx))))
    if not kept:
        return ProfileCosts([], StepFeatures(*(np.zeros(0) for _ in range(6))), np.zeros(0), np.zeros(0), np.zeros(0),
                            np.zeros((4, 0)), [], rates, np.zeros(0, dtype=object), issues)
    return ProfileCosts(kept, StepFeatures.concat(feats), np.concatenate(meas), np.concatenate(fmax),
                        np.concatenate(fsum), np.concatenate(times, axis=1), groups, rates,
                        np.array(hw_names, dtype=object), issues)
