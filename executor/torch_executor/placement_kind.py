"""Which attention primitive the torch executor runs a layout with, read from the layout's placement.

What it does: one mapping from a planner `Placement` (planner/layouts/placement.py: G owner groups of
R = T/G ranks, the ways a request's tokens and the head-sharded weights split) to the executor's
attention primitives (layouts.py), so no module of the executor tests a layout's name:
- "tp": one group (G = 1), tokens whole, weights split over all T ranks (weight_split = T): every
  rank keeps every request's latent and attends its T-th of the heads;
- "cp": a request's tokens split over the one group (token_split > 1), weights replicated;
- "dp": T groups of one rank (G = T), weights replicated: each owner attends its own requests;
- "dop": T groups of one rank, weights split over all T (weight_split = T): queries travel to the
  owners by all-to-all and outputs back;
- "dptp": 1 < G < T groups, tokens whole, weights split over the group's R ranks (weight_split = R):
  TP inside each group over the requests it owns, DP across groups (SGLang's `--dp` < `--tp` with
  `--enable-dp-attention`; planner/layouts/dptp.py).
At T = 1 every placement is one rank holding everything (G = 1, nothing split): TP's primitive.
Any other placement is refused in one line naming the layout and what the executor lacks (DCP: a
token split with head-sharded weights needs vLLM's query all-gather and output reduce-scatter).
`ExecLayout` is a layout as the executor runs it: its placement, its primitive, and the facts the
other modules read (who holds a page, which heads a rank keeps, whether a request has an owner).
NOTE: the executor runs MLA, whose one latent head can't split by heads: every rank of a request's
group keeps its latent (`Placement.kv_copies` = R), whatever `head_split_ranks` says for a GQA cache.
What it does not do: price a layout (the planner does), or run one (layouts.py, runner.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from planner.errors import SpecError
from planner.layouts import attention_layouts
from planner.layouts.placement import Placement

PRIMITIVES = ("tp", "cp", "dp", "dop", "dptp")  # the executor's attention primitives (layouts.ATTENTION)


class NotRunnable(SpecError):
    """A layout whose placement none of the executor's attention primitives runs (one line)."""


def primitive_or_reason(p: Placement) -> tuple[str | None, str]:
    """(the primitive that runs placement `p`, "") or (None, a one-line reason naming the layout)."""
    t, g, r, ts, ws = p.ranks, p.owner_groups, p.group_ranks, p.token_split, p.weight_split
    if g == 1 and ts == 1 and ws == t:
        return "tp", ""
    if g == 1 and ts > 1 and ws == 1:
        return "cp", ""
    if g == t and ws == 1:
        return "dp", ""
    if g == t and ws == t:
        return "dop", ""
    if 1 < g < t and ts == 1 and ws == r:
        return "dptp", ""
    if ts > 1 and ws > 1:
        return None, (f"layout {p.layout} splits each request's tokens {ts} ways with its attention weights split "
                      f"{ws} ways: the torch executor has no attention that all-gathers queries and reduce-scatters "
                      f"outputs over a token split (vLLM's DCP); it splits tokens only with replicated weights (cp)")
    if ts > 1:
        return None, (f"layout {p.layout} splits tokens inside each of {g} owner groups of {r} ranks: the torch "
                      f"executor's token-split attention (cp) merges over one group of all {t} ranks")
    return None, (f"layout {p.layout}'s placement ({g} owner group(s) of {r} rank(s), weights split {ws} ways) "
                  f"matches none of the torch executor's attention primitives ({', '.join(PRIMITIVES)})")


@dataclass(frozen=True)
class ExecLayout:
    """A layout as the executor runs it: its placement and primitive (module docstring)."""

    placement: Placement
    primitive: str

    @property
    def name(self) -> str:
        return self.placement.layout

    @property
    def ranks(self) -> int:
        return self.placement.ranks

    @property
    def groups(self) -> int:
        """G: the owner groups requests are spread over."""
        return self.placement.owner_groups

    @property
    def group_ranks(self) -> int:
        """R = T/G: the ranks of one owner group (consecutive ranks)."""
        return self.placement.group_ranks

    @property
    def weight_split(self) -> int:
        """Ways the per-head attention weights split (1: every rank keeps every head)."""
        return self.placement.weight_split

    @property
    def owned(self) -> bool:
        """A request has an owner group: its KV lives on that group's ranks alone (G > 1)."""
        return self.groups > 1

    @property
    def moves_queries(self) -> bool:
        """Heads split over more ranks than hold a request's KV (DOP): queries go to the owners and
        outputs come back, by all-to-all."""
        return self.weight_split > self.group_ranks

    @property
    def attends_own_rows(self) -> bool:
        """Each group attends only the requests it owns (DP, DPTP): rows outside it are zero."""
        return self.owned and not self.moves_queries

    @property
    def gathers_prefix(self) -> bool:
        """A rank that attends a prefill piece doesn't hold all of its prefix (CP's token split, DOP's
        owner): the prefix is gathered from its holders."""
        return self.placement.token_split > 1 or self.moves_queries

    @property
    def chunk_reduced(self) -> bool:
        """A chunk's attention rows are summed over ranks (partial over heads, or zero outside their
        group); not under CP, where every rank attends every head of every row."""
        return self.weight_split > 1 or self.owned

    def group_of_rank(self, rank: int) -> int:
        return rank // self.group_ranks

    def owner_group(self, owners: Mapping[int, int], req: int) -> int:
        """The group of a request's owner rank (owners: request -> rank, the loop's owner)."""
        return owners[req] // self.group_ranks

    def holders(self, req: int, lp: int, owners: Mapping[int, int]) -> tuple[int, ...]:
        """Ranks that store logical page `lp` of request `req`: every rank of its group (its owner's,
        or the one group), or, where tokens split, one of them by page."""
        r = self.group_ranks
        base = 0 if self.groups == 1 else (owners[req] // r) * r
        ts = self.placement.token_split
        if ts > 1:
            # NOTE: offset by request id so one-page requests don't all land on the group's first rank.
            return (base + (req + lp) % ts,)
        return tuple(range(base, base + r))

    def head_range(self, rank: int, num_heads: int) -> tuple[int, int]:
        """(first head, count) of the per-head weights `rank` keeps: its slice of `weight_split` ways
        (by its index in the group for DPTP, in the whole group for TP and DOP), or every head."""
        ws = self.weight_split
        count = num_heads // ws
        return (rank % ws) * count, count

    def kernel_heads(self, num_heads: int) -> int:
        """Heads per request the decode kernel sees: the rank's slice where the ranks that attend a
        request split its heads (TP, DPTP), every head where they don't (CP, DP) or where the
        queries come to the owner (DOP)."""
        return num_heads // min(self.weight_split, self.group_ranks)


def registry_placement(name: str, ranks: int, groups: int | None = None) -> Placement:
    """The planner's placement of registered layout `name` on `ranks` ranks (a layout that takes a
    group count: `groups`, default its own default for one node)."""
    reg = attention_layouts()
    lay = reg.get(name)
    if lay is None:
        raise SpecError(f"layout {name!r} is not registered (registered: {', '.join(reg)})")
    if groups is None and lay.group_rule == "given":
        groups = lay.default_groups(ranks)
    return lay.placement(ranks, groups)


_CACHE: dict = {}


def exec_layout(layout, ranks: int | None = None, groups: int | None = None) -> ExecLayout:
    """`layout` (an ExecLayout, a Placement, or a registered name on `ranks` ranks) as the executor
    runs it; NotRunnable (one line) if no primitive runs its placement."""
    if isinstance(layout, ExecLayout):
        return layout
    if isinstance(layout, Placement):
        prim, why = primitive_or_reason(layout)
        if prim is None:
            raise NotRunnable(why)
        return ExecLayout(layout, prim)
    if ranks is None:
        raise ValueError(f"layout {layout!r}: the group's rank count is needed to read its placement")
    key = (layout, int(ranks), groups, type(attention_layouts().get(layout)))
    got = _CACHE.get(key)
    if got is None:
        got = _CACHE[key] = exec_layout(registry_placement(layout, int(ranks), groups))
    return got


def refusal(placement: Placement | None, name: str = "") -> str:
    """'' if the executor runs `placement`, else the one-line reason (None: the model can't run it)."""
    if placement is None:
        return f"the model can't run layout {name} on this group (the planner refused it)"
    return primitive_or_reason(placement)[1]
