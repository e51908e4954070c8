"""A multi-step decode driver for one rank: weights, paged cache, the active layout, switches.

What it does: `RankRunner` holds this rank's weights (attention heads per the layout, FFN
columns always TP-sharded), one KV pool [L, P, page, C+R], the requests' lengths and the
active `LayoutState`; `step()` runs one decode step of every request (new token's latent
written to the pages that hold it — both layouts' pages while a switch is copying — then per
layer the layout's attention and the FFN) and returns the final residual [B, D], identical
on every rank. `switch_to()` starts a transition (transitions.py) that `step()` advances in
the background and commits at the plan's boundary (or, `auto_commit=False`, when the caller calls
`commit_switch()` once the switch is `ready`; `abort_switch()` drops it). Requests can be admitted
and finished while a switch is in flight (both layouts' pages are written, or freed).
A step is host bookkeeping (pages for the new token, one fill of fixed-shape inputs, one copy;
step_inputs.py) followed by the device work, which on CUDA is one CUDA-graph replay
(step_graph.py) captured once per layout state, batch and page capacity. The host never waits
for the device, so it runs ahead and its bookkeeping hides behind earlier steps.
What it does not do: sampling (inputs are synthetic embeddings of (request, position)),
prefill (history is synthetic, written straight into pages; a preempted request's KV is kept on
the host by `save_request` and written back on re-admission, as a recompute would rebuild it),
admission or preemption policy.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .config import MLADims
from .dist import GroupLost, RankGroups, agree_any, bounded_waits, rebuild_side
from .kernels import KernelConfig, decode_kernel
from .kv_pages import (OutOfPages, PageTable, SlotAllocator, check_layout_kind, gather_logical_kv, holders,
                       pages_for, write_history, write_kv)
from .layers import ffn_partial, kv_latent, make_layer_weights, rms_norm, token_embeddings
from .layouts import ATTENTION, LayoutState, heads_sharded, kernel_heads, weight_slots_needed
from .recovery import AgreedFailure, recover
from .step_graph import StepExec
from .step_inputs import StepInputs


class RankRunner:
    """One rank of a T-rank MLA decode stack."""

    def __init__(self, dims: MLADims, groups: RankGroups, layout: str, num_slots: int,
                 dtype: torch.dtype = torch.float32, seed: int = 0, kernel_config: KernelConfig | None = None,
                 use_graphs: bool | None = None, headroom_pages: int | None = None):
        """use_graphs: capture steps in CUDA graphs (default: on CUDA). headroom_pages: block-table
        capacity beyond the longest local request when inputs are built (default 4 on CUDA, 1 on
        CPU); a request outgrowing it makes the next step rebuild (and recapture)."""
        check_layout_kind(layout)
        dims.check_world_size(groups.world_size)
        self.dims, self.g, self.dtype, self.seed = dims, groups, dtype, seed
        self.kernel_config = kernel_config
        t, r, dev = groups.world_size, groups.rank, groups.device
        self.pool = (torch.empty if groups.is_cuda else torch.zeros)(
            (dims.num_layers, num_slots, dims.page_size, dims.latent_dim), dtype=dtype, device=dev)  # [L, P, page, C+R]
        self.alloc = SlotAllocator(num_slots)
        self.page_bytes = dims.kv_bytes_per_page(self.pool.element_size())
        hs = dims.num_heads // t
        self.replicated, self.ffn, heads = [], [], []
        for layer in range(dims.num_layers):
            if heads_sharded(layout):
                lw = make_layer_weights(dims, layer, seed, r * hs, hs, r, t, dev, dtype)
            else:
                lw = make_layer_weights(dims, layer, seed, 0, dims.num_heads, r, t, dev, dtype)
            self.replicated.append(lw.attn)
            self.ffn.append(lw.ffn)
            heads.append(lw.heads)
        self.head_bytes_full = sum(h.nbytes() for h in heads) * (t if heads_sharded(layout) else 1)
        self.state = LayoutState(layout, PageTable(layout, {}), heads, [])
        self.state.weight_slots = self.alloc.reserve(self.weight_slots_for(layout))
        # NOTE: one reserved slot takes the padded writes of fixed-shape steps (and dry runs).
        self.trash_token = self.alloc.reserve(1)[0] * dims.page_size
        self.use_graphs = groups.is_cuda if use_graphs is None else use_graphs
        self.headroom_pages = headroom_pages if headroom_pages is not None else (4 if groups.is_cuda else 1)
        self.exec: StepExec | None = None
        # replaced execs and states, each with the event after the last work that may read them:
        # kept until the device has passed it (in-flight replays), dropped by `reap_retired`
        self.retired: list = []
        self.seq_lens: dict[int, int] = {}
        self.order: list[int] = []
        self.owner_of: dict[int, int] = {}  # each request's owner as the caller keeps it (every layout)
        self.saved: dict[int, torch.Tensor] = {}  # preempted requests' KV, [L, n, C+R] on the host
        self.step_index = 0
        self.switch = None  # transitions.Transition while one is in flight
        self.side_stream = torch.cuda.Stream(device=dev) if groups.is_cuda else None

    # ---- bookkeeping -------------------------------------------------------------------------
    def weight_slots_for(self, kind: str) -> int:
        return weight_slots_needed(kind, self.head_bytes_full, self.g.world_size, self.page_bytes)

    @property
    def layout(self) -> str:
        return self.state.kind

    def add_requests(self, lengths: dict[int, int], owners: dict[int, int] | None = None) -> None:
        """Admit requests with `lengths[req]` tokens of history: synthetic, or the KV `save_request`
        kept for a preempted one. `owners`: each request's owner rank (owner layouts; default the
        least-loaded). During a switch the other layout's pages (the destination's, or on probation
        the fallback's) are written too."""
        tables = self._tables_written()
        load = [0] * self.g.world_size
        for req, rank in self.state.table.owners.items():
            load[rank] += self.seq_lens[req]
        for req in sorted(lengths, key=lambda q: (-lengths[q], q)):
            rank = owners[req] if owners else min(range(self.g.world_size), key=lambda k: (load[k], k))
            if owners:
                self.owner_of[req] = rank
            load[rank] += lengths[req]
            for table in tables:
                if table.kind in ("dp", "dop"):
                    table.owners[req] = rank
        for req, n in lengths.items():
            if req in self.seq_lens:
                raise ValueError(f"request {req} is already running")
            self.seq_lens[req] = n
            self.order.append(req)
            kept = self.saved.pop(req, None)
            if kept is not None and kept.shape[1] != n:
                raise ValueError(f"request {req} was saved with {kept.shape[1]} tokens, admitted with {n}")
            for ti, table in enumerate(tables):
                if ti and self.switch.mirror_table() is not table:
                    continue  # the switch gave its pages back (or failed) admitting an earlier one
                try:
                    for lp in range(pages_for(n, self.dims.page_size)):
                        if table.holds(self.g.rank, self.g.world_size, req, lp):
                            slot = tables[0].pages.get(req, {}).get(lp) if ti else None
                            table.add(req, lp, slot if slot is not None else self._new_slot(ti > 0))
                except OutOfPages as e:
                    if not ti:
                        raise
                    # NOTE: no room for the other layout's copy: the switch fails (every rank
                    # aborts at the next agreement) or loses its fallback; the request runs as is
                    self._mirror_lost(f"no memory for request {req}'s pages in {table.kind}: {e}")
                    continue
                if kept is None:
                    write_history(self.pool, table, req, n, self.seed)
                else:
                    write_kv(self.pool, table, req, kept)

    def _new_slot(self, mirror: bool) -> int:
        """A page slot for the serving layout's table or (`mirror`) the switch's other one."""
        sw = self.switch
        if sw is not None and (sw.guarding or mirror):
            return sw.take_page(self, mirror)
        return self.alloc.alloc(1)[0]

    def _mirror_lost(self, reason: str) -> None:
        """The switch's other table could not get a page: while copying the switch fails; on
        probation the fallback is incomplete, so the group can't roll back (agreed) any more."""
        sw = self.switch
        if sw.state.value == "copying":
            sw.fail(reason)
        else:
            sw._fallback = False

    def finish_request(self, req: int) -> None:
        """Free a request's pages (both layouts' during a switch: freed when it commits or aborts)."""
        slots = self.state.table.remove_request(req)
        self.state.table.owners.pop(req, None)
        sw = self.switch
        if sw is not None and sw.in_flight and sw.new is not None:
            slots = sorted(set(slots) | set(sw.new.table.remove_request(req)))
            sw.new.table.owners.pop(req, None)
            sw.deferred_free.extend(slots)
        elif sw is not None and sw._old is not None:  # on probation: the fallback's copy too
            self.alloc.release(sorted(set(slots) | set(sw._old.table.remove_request(req))))
            sw._old.table.owners.pop(req, None)
        else:
            self.alloc.release(slots)
        self.order.remove(req)
        del self.seq_lens[req]
        self.owner_of.pop(req, None)

    def save_request(self, req: int) -> None:
        """Keep a request's KV on the host (every rank: a collective on the control group) and free
        its pages: a preempted request, admitted again later with the same history."""
        from .checks import collect_request_kv

        self.saved[req] = collect_request_kv(self, req)
        self.finish_request(req)

    def _tables_written(self) -> list[PageTable]:
        """The serving layout's table, and the switch's other one while it is written."""
        mirror = self.switch.mirror_table() if self.switch is not None else None
        return [self.state.table] if mirror is None else [self.state.table, mirror]

    def _prepare_writes(self) -> tuple[list[int], list[int]]:
        """Allocate pages for each request's new token; return (rows [n] into B, flat token idx [n]).
        A page both tables hold shares one slot, written once."""
        page, t, r = self.dims.page_size, self.g.world_size, self.g.rank
        rows, toks = [], []
        tables = self._tables_written()
        for table_i, table in enumerate(tables):
            if table_i and self.switch.mirror_table() is not table:
                break  # the switch gave its pages back for the serving layout's (transitions.surrender)
            for i, req in enumerate(self.order):
                pos = self.seq_lens[req]
                lp = pos // page
                if r not in holders(table.kind, t, req, lp, table.owners):
                    continue
                slot = table.pages.get(req, {}).get(lp)
                shared = tables[0].pages.get(req, {}).get(lp) if table_i else None
                if slot is None:
                    try:
                        slot = shared if shared is not None else self._new_slot(table_i > 0)
                    except OutOfPages as e:
                        if table_i == 0:
                            raise
                        self._mirror_lost(f"no memory for a new page of {table.kind}: {e}")
                        break
                    table.add(req, lp, slot)
                if shared is not None and shared == slot:
                    continue  # a slot both tables hold: written once, through the serving table
                rows.append(i)
                toks.append(slot * page + pos % page)
        return rows, toks

    def _host_work(self) -> tuple[list[int], list[int], StepExec | None]:
        """A step's host bookkeeping: pages for the new tokens, and a new (unprepared) executable
        when the current one's inputs can't hold this step."""
        rows, toks = self._prepare_writes()
        ex = None
        if self.exec is None or not self.exec.inputs.fits(self.state, self.order, self.seq_lens):
            ex = self.build_exec(self.state, prepare=False)
        return rows, toks, ex

    def build_exec(self, state: LayoutState, extra_pages: int = 0, prepare: bool = True) -> StepExec:
        """Fixed-shape inputs (and, on CUDA, a captured graph) for `state` and the current batch.

        extra_pages: growth to allow for beyond the headroom (a switch passes its copy steps).
        prepare: False leaves the capture (collectives on every rank) to the caller's `prepare()`.
        """
        page = self.dims.page_size
        # logical pages after this step's token, the same on every rank (see StepInputs.fits)
        longest = max([pages_for(self.seq_lens[q] + 1, page) for q in self.order] + [1])
        cap = longest + self.headroom_pages + extra_pages
        inputs = StepInputs(state, self.order, self.g.rank, self.g.world_size, page, cap, self.trash_token,
                            self.g.device)
        heads = kernel_heads(state.kind, self.dims.num_heads, self.g.world_size)
        inputs.batch.kernel = decode_kernel(self.kernel_config, heads, len(inputs.att), inputs.cap, self.dims,
                                            self.dtype, self.g.device)
        ex = StepExec(inputs, self._forward, self.use_graphs)
        if prepare:
            ex.prepare(self.seq_lens)
        return ex

    def _forward(self, inp: StepInputs) -> torch.Tensor:
        """Device work of one step on fixed-shape inputs. -> [B, D] final residual."""
        dims, st = self.dims, inp.state
        x = token_embeddings(inp.req, inp.pos, dims.hidden_size, self.seed).to(self.dtype)  # [B, D]
        attention = ATTENTION[st.kind]
        flat = self.pool.view(dims.num_layers, -1, dims.latent_dim)  # [L, P*page, C+R]
        fault = self._device_fault_layer()
        for layer in range(dims.num_layers):
            if layer == fault:  # NOTE: injected (Faults): this rank stops between two of the step's collectives
                raise RuntimeError(f"injected: the first step after the commit failed in its device work on "
                                   f"rank {self.g.rank} (layer {layer})")
            attn = self.replicated[layer]
            h = rms_norm(x, attn.attn_norm, dims.rms_eps)  # [B, D]
            latent = kv_latent(h, attn, inp.pos, dims)  # [B, C+R]
            flat[layer].index_copy_(0, inp.wtoks, latent.index_select(0, inp.wrows))  # padding -> trash
            x = x + attention(h, attn, st.heads[layer], self.pool[layer], inp.batch, dims, self.g,
                              self.kernel_config)
            f = ffn_partial(x, self.ffn[layer], dims)  # [B, D] partial over FFN columns
            dist.all_reduce(f, group=self.g.main)
            x = x + f
        return x

    def retire(self, obj) -> None:
        """Keep `obj` (a replaced StepExec or LayoutState) alive until the work enqueued so far,
        which may still read its tensors, is done. NOTE: on CUDA a replay returns before the device
        runs it, so a replaced graph's buffers must outlive its last launch; an event recorded on
        the main stream now is passed when every launch before it is done (the main stream waited
        on the side stream before any commit retires a state). On CPU work is synchronous: no event."""
        ev = None
        if self.g.is_cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.g.device))
        self.retired.append((obj, ev))

    def reap_retired(self) -> None:
        """Drop the retired objects whose event the device has passed."""
        self.retired[:] = [x for x in self.retired if x[1] is not None and not x[1].query()]

    # ---- the step ----------------------------------------------------------------------------
    def step(self) -> torch.Tensor:
        """One decode step of every running request. Returns the final residual [B, D] (on CUDA
        with graphs, the graph's output buffer: clone it to keep it past the next step). While a
        switch is copying or on probation, the host work is agreed on by every rank before the
        device work (transitions.Transition.guard), and any other failure of the step — a rank
        raising in its device work, a peer that died — is agreed within seconds (recovery.py): the
        switch is dropped and the step run again, or, a peer gone, dist.GroupLost is raised."""
        sw = self.switch
        if sw is not None:
            sw.before_step(self)
        if self.retired:
            self.reap_retired()
        if sw is not None and sw.guarding:
            try:
                x = self._step_work(sw)
            except (GroupLost, AgreedFailure):
                raise
            except Exception as exc:  # noqa: BLE001 - agreed by every rank in recover (or GroupLost)
                recover(self, exc)
                try:
                    x = self._step_work(None)  # once more, in the layout the group agreed on
                finally:
                    bounded_waits(self.g, False)
        else:
            x = self._step_work(None)
        for q in self.order:
            self.seq_lens[q] += 1
        if sw is not None:
            sw.after_step(self)
        self.step_index += 1
        return x

    def _step_work(self, sw) -> torch.Tensor:
        """The step's host work (agreed on through `sw` when it guards) and its device work."""
        rows, toks, ex = sw.guard(self, self._host_work) if sw is not None else self._host_work()
        if ex is not None:
            ex.prepare(self.seq_lens)
            if self.exec is not None:
                self.retire(self.exec)
            self.exec = ex
        self.exec.inputs.upload(self.seq_lens, rows, toks)
        return self.exec.run()

    def _device_fault_layer(self) -> int:
        """The layer at which an injected device fault raises on this rank this step (-1: none)."""
        sw = self.switch
        f = sw.faults if sw is not None else None
        return 1 if f is not None and sw.probation and f.fail_device_after_commit_rank == self.g.rank else -1

    def idle_step(self) -> None:
        """A step with nothing decoding (the caller's step ran only a prefill): the switch in
        flight still agrees and moves its chunk of this step, so it advances as under decode steps."""
        sw = self.switch
        if sw is not None:
            sw.before_step(self)
            if sw.guarding:
                try:
                    sw.guard(self, lambda: None)
                except (GroupLost, AgreedFailure):
                    raise
                except Exception as exc:  # noqa: BLE001 - a peer's fault: agreed in recover
                    recover(self, exc)
                    bounded_waits(self.g, False)
            sw.after_step(self)
        self.step_index += 1

    def switch_to(self, kind: str, bytes_per_step: int, faults=None, auto_commit: bool = True,
                  after_commit: str = "rollback"):
        """Plan and begin a switch to `kind` at this batch boundary; returns the Transition. An
        owner destination keeps each request's owner as admitted (`owner_of`). `after_commit`: what
        a failure in the step after the commit does (transitions.py: "rollback" or "forward")."""
        from .transitions import Transition, plan_page_moves

        check_layout_kind(kind)
        if self.switch is not None and self.switch.in_flight:
            raise RuntimeError(f"a switch to {self.switch.plan.dst_kind} is already in flight")
        if self.switch is not None and self.switch.probation:
            self.switch._end_probation(self)  # committed at this boundary, no step since
        owners = self.owner_of if all(q in self.owner_of for q in self.seq_lens) else None
        plan = plan_page_moves(self.state.kind, kind, self.g.world_size, dict(self.seq_lens),
                               dict(self.state.table.owners), self.dims, self.pool.element_size(),
                               self.head_bytes_full, self.step_index, bytes_per_step, owners)
        self.switch = Transition(plan, faults, auto_commit, after_commit)
        self.switch.begin(self)
        return self.switch

    def commit_switch(self) -> None:
        """Hand off at this batch boundary (the switch is `ready`)."""
        if self.switch is None or not self.switch.ready:
            raise RuntimeError("no switch ready to commit")
        self.switch.commit(self)

    def abort_switch(self, reason: str) -> None:
        """Drop the switch in flight at this boundary (every rank calls it: one agreement on whether
        a transfer broke the side group, which is then rebuilt); the old layout is untouched."""
        sw = self.switch
        if sw is not None and sw.in_flight:
            if agree_any(sw.side_broken, self.g):
                rebuild_side(self.g)
                sw.side_broken = False
            sw.abort(self, reason)

    # ---- checks ------------------------------------------------------------------------------
    def local_logical_kv(self) -> dict[int, tuple[list[int], torch.Tensor]]:
        """Held tokens of each request in logical order: req -> (held logical pages, [L, n, C+R] cpu)."""
        table = self.state.table
        return {q: (sorted(table.pages.get(q, {})),
                    gather_logical_kv(self.pool, table, q, self.seq_lens[q]).cpu())
                for q in self.order}

    def check_pages(self) -> None:
        """Raise unless every slot is exactly one of: free, reserved, or one logical page of a table."""
        used: dict[int, tuple] = {}
        sw = self.switch
        tables = [self.state.table] + ([sw.new.table] if sw is not None and sw.in_flight else []) \
            + ([sw._old.table] if sw is not None and sw._old is not None else [])
        for table in tables:
            for req, per in table.pages.items():
                for lp, slot in per.items():
                    if used.setdefault(slot, (req, lp)) != (req, lp):
                        raise AssertionError(f"slot {slot} holds {used[slot]} and {(req, lp)}")
        free = self.alloc.free_set()
        self.alloc.check_disjoint()
        reserved = set(self.alloc.reserved)
        deferred = set(sw.deferred_free) | set(sw.spare) | set(sw.ballast) if sw is not None else set()
        if free & set(used) or reserved & set(used) or free & reserved or deferred & (free | reserved | set(used)):
            raise AssertionError("a slot is both used and free/reserved")
        if len(free) + len(reserved) + len(used) + len(deferred) != self.alloc.num_slots:
            raise AssertionError(f"slots lost: {len(free)} free + {len(reserved)} reserved + {len(used)} used "
                                 f"+ {len(deferred)} to free or spare != {self.alloc.num_slots}")
        for req, n in self.seq_lens.items():
            for lp in range(pages_for(n, self.dims.page_size)):
                held = lp in self.state.table.pages.get(req, {})
                if held != self.state.table.holds(self.g.rank, self.g.world_size, req, lp):
                    raise AssertionError(f"request {req} page {lp} held={held} disagrees with layout "
                                         f"{self.state.kind}")

