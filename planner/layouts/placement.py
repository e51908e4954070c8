"""Placement: who holds what under one attention layout on one group of T ranks, as one frozen value.

Every consumer that used to ask a layout's name, or whether it is "an owner layout", reads this
instead (capacity, the engines' memory models, the runtime's compiled tables and KV ledger, the
serving loop, the policy, transitions, the executor). It is compiled once per (layout, deployment)
from what the layout module declares (planner/layouts/base.py `AttentionLayout`):

- `owner_groups` G: groups of ranks that each hold whole requests' KV. TP, CP and DCP are one group
  of T ranks; DP-attention and DOP are T groups of one; SGLang's DP attention with dp < tp (and
  vLLM's DP × TP) is dp groups of T/dp ranks, attention TP inside each (planner/layouts/dptp.py).
  A request's KV lives in one group; requests are spread over groups;
- `group_ranks` R = T/G: the ranks of one group;
- `token_split`: the ways a request's tokens are split inside its group (CP, DCP: R; else 1);
- `head_split_ranks`: the ranks of the group over which a request's KV is split by heads where the
  variant has enough KV heads (TP: T; DP attention with attention TP: R; else 1). A variant's
  actual split is `head_split(variant)` = min(R, KV heads) when they divide (MLA's one latent: 1,
  so every rank of the group keeps every token);
- `weight_split`: the ways head-sharded attention weights are split (TP, DCP, DOP: T; DP attention
  with attention TP: R; CP and DP-attention: 1), and `lm_head_split` the same for the LM head and
  embeddings;
- `kv_copies(variant)` = R / (token_split · head_split): copies of each token's KV in its group.

`attention_dp_size` is the group count engines launch as data-parallel attention (SGLang `--dp`
with `--enable-dp-attention`, vLLM `--data-parallel-size` on a MoE model): G where the weights are
split inside each group and replicated across groups (dp, dptp); 1 elsewhere (DOP splits its weights
over all T ranks, so no engine flag runs it).

Does not: price anything (the layouts' shares and the step model do), or know a layout's name
beyond carrying it for messages.
"""

from __future__ import annotations

from dataclasses import dataclass


def kv_split_ways(variant, ranks: int) -> float:
    """How many ways `ranks` ranks splitting heads split one variant's cache: min(ranks, KV heads)
    when one divides the other, else 1 (a recurrent state by its heads; MLA's single latent: 1)."""
    h = variant.kv_splittable_heads()
    t = ranks
    if t <= 1:
        return 1.0
    if h >= t:
        return float(t) if h % t == 0 else 1.0
    return float(h) if t % h == 0 else 1.0


@dataclass(frozen=True)
class Placement:
    """Who holds what under one layout on a group of `ranks` ranks (module docstring)."""

    layout: str
    ranks: int  # T
    owner_groups: int  # G
    token_split: int  # ways a request's tokens split inside its group
    head_split_ranks: int  # ranks of the group that split a request's KV by heads
    weight_split: int  # ways head-sharded attention weights split
    lm_head_split: int  # ways the LM head (and embeddings) split

    def __post_init__(self) -> None:
        g, t = self.owner_groups, self.ranks
        if g < 1 or t % g:
            raise ValueError(f"layout {self.layout}: {g} owner groups do not divide {t} ranks")
        r = t // g
        for name in ("token_split", "head_split_ranks"):
            v = getattr(self, name)
            if v < 1 or r % v:
                raise ValueError(f"layout {self.layout}: {name}={v} does not divide the group's {r} ranks")
        for name in ("weight_split", "lm_head_split"):
            v = getattr(self, name)
            if v < 1 or t % v:
                raise ValueError(f"layout {self.layout}: {name}={v} does not divide {t} ranks")

    @property
    def group_ranks(self) -> int:
        """R: ranks in one owner group."""
        return self.ranks // self.owner_groups

    @property
    def spread(self) -> bool:
        """One group holds every request (TP, CP, DCP): the group's share is the whole deployment's."""
        return self.owner_groups == 1

    def head_split(self, variant) -> float:
        """Ways one variant's cache splits by heads inside a group."""
        return kv_split_ways(variant, self.head_split_ranks)

    def rank_share(self, variant) -> float:
        """Fraction of one request's KV (of this variant) one rank of its group stores."""
        return 1.0 / (self.token_split * self.head_split(variant))

    def kv_copies(self, variant) -> float:
        """Copies of each token's KV (of this variant) inside its group."""
        return self.group_ranks * self.rank_share(variant)

    @property
    def attention_dp_size(self) -> int:
        """The data-parallel attention size engines launch this layout with (module docstring)."""
        if self.owner_groups > 1 and self.weight_split == self.group_ranks:
            return self.owner_groups
        return 1

    def group_of_rank(self, rank: int) -> int:
        """The owner group rank `rank` belongs to (groups are consecutive ranks)."""
        return rank // self.group_ranks

    def describe(self) -> dict:
        """JSON view (units in keys: counts of ranks and ways)."""
        return {"layout": self.layout, "ranks": self.ranks, "owner_groups": self.owner_groups,
                "group_ranks": self.group_ranks, "token_split": self.token_split,
                "head_split_ranks": self.head_split_ranks, "weight_split": self.weight_split,
                "lm_head_split": self.lm_head_split, "attention_dp_size": self.attention_dp_size}
