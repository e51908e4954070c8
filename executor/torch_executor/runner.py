"""A multi-step driver for one rank: weights, paged cache, the active layout, prefill, switches.

What it does: `RankRunner` holds this rank's weights (attention heads per the layout, FFN
columns always TP-sharded), one KV pool [L, P, page, C+R], the requests' lengths and the
active `LayoutState`; `step(chunks)` runs one step: a decode token of every request that decodes
(`order`) and, when `chunks` names some, prompt tokens of requests being prefilled (a mixed step,
as vLLM and TensorRT-LLM schedule; `decode=False` runs the chunk alone, SGLang's default prefill
step). Each token's latent is written to the pages that hold it — both layouts' pages while a
switch is copying — then per layer the decode rows take the layout's absorbed attention and the
chunk rows the causal MHA-form attention over their request's prefix (prefill.py), and all rows
the FFN; it returns the decode rows' final residual [B, D], identical on every rank (the chunk
rows' is `last_chunk_out`). A request is prefilled by `begin_prefill` and chunks, then decodes
after `finish_prefill`: the KV its prefill wrote is the KV its decode reads. `add_requests` instead
writes synthetic history straight into pages (or the KV `save_request` kept on the host).
`switch_to()` starts a transition (transitions.py) that `step()` advances in the background and
commits at the plan's boundary (or, `auto_commit=False`, when the caller calls `commit_switch()`
once the switch is `ready`; `abort_switch()` drops it). Requests can be admitted, prefilled and
finished while a switch is in flight (both layouts' pages are written, or freed).
A decode step is host bookkeeping (pages for the new tokens, one fill of fixed-shape inputs, one
copy; step_inputs.py) followed by the device work, which on CUDA is one CUDA-graph replay of the
batch's bucket (buckets.py: captured once per layout and bucket, at start-up by `prepare_buckets`
or on first use; a batch change inside a bucket replays the same graph). A step with a prefill
chunk runs eagerly. The host never waits for the device, so it runs ahead and its bookkeeping
hides behind earlier steps.
What it does not do: sampling (inputs are synthetic embeddings of (request, position)),
admission or preemption policy.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .config import MLADims
from .buckets import BUCKETS, ExecCache, cap_bucket
from .dist import GroupLost, RankGroups, agree_any, bounded_waits, rebuild_side
from .kernels import KernelConfig, decode_kernel
from .kv_pages import (OutOfPages, PageTable, SlotAllocator, gather_logical_kv, least_loaded, pages_for,
                       write_history, write_kv)
from .layers import ffn_partial, kv_latent, make_layer_weights, rms_norm, token_embeddings
from .layouts import ATTENTION, LayoutState, weight_slots_needed
from .placement_kind import ExecLayout, exec_layout
from .prefill import ChunkInputs, chunk_attention
from .recovery import AgreedFailure, recover
from .step_graph import StepExec
from .step_inputs import StepInputs


class RankRunner:
    """One rank of a T-rank MLA decode stack."""

    def __init__(self, dims: MLADims, groups: RankGroups, layout, num_slots: int,
                 dtype: torch.dtype = torch.float32, seed: int = 0, kernel_config: KernelConfig | None = None,
                 use_graphs: bool | None = None, buckets: str | list[int] = "sglang", max_batch: int = 256,
                 placements: dict | None = None):
        """layout: a registered layout's name, a planner Placement or an ExecLayout (placement_kind.py:
        the primitive it runs is read off its placement; NotRunnable, one line, if none runs it).
        placements: {name: planner Placement} the names given here and to `switch_to` resolve to (a
        serving loop passes its tables' `LayoutInfo.placements`, so a layout with a group count runs
        the tables' G); a name not in it takes the registry's placement on T ranks (its default G).
        use_graphs: capture steps in CUDA graphs (default: on CUDA). buckets: the batch sizes a
        decode batch pads to ("sglang", "vllm" or a sorted list; buckets.BUCKETS), up to max_batch
        (a larger batch runs eagerly at its own size)."""
        self.placements = {k: v for k, v in (placements or {}).items() if v is not None}
        dims.check_world_size(groups.world_size)
        self.dims, self.g, self.dtype, self.seed = dims, groups, dtype, seed
        lay = self.resolve_layout(layout)
        self.kernel_config = kernel_config
        t, r, dev = groups.world_size, groups.rank, groups.device
        self.pool = (torch.empty if groups.is_cuda else torch.zeros)(
            (dims.num_layers, num_slots, dims.page_size, dims.latent_dim), dtype=dtype, device=dev)  # [L, P, page, C+R]
        self.alloc = SlotAllocator(num_slots)
        self.page_bytes = dims.kv_bytes_per_page(self.pool.element_size())
        h0, hs = lay.head_range(r, dims.num_heads)  # this rank's heads: its slice of weight_split ways
        self.replicated, self.ffn, heads = [], [], []
        for layer in range(dims.num_layers):
            lw = make_layer_weights(dims, layer, seed, h0, hs, r, t, dev, dtype)
            self.replicated.append(lw.attn)
            self.ffn.append(lw.ffn)
            heads.append(lw.heads)
        self.head_bytes_full = sum(h.nbytes() for h in heads) * lay.weight_split
        self.state = LayoutState(lay, PageTable(lay, {}), heads, [])
        self.state.weight_slots = self.alloc.reserve(self.weight_slots_for(lay))
        # NOTE: one reserved slot takes the padded writes of fixed-shape steps (and dry runs); zeroed,
        # so a dry run that attends it reads finite values
        trash = self.alloc.reserve(1)[0]
        self.pool[:, trash].zero_()
        self.trash_token = trash * dims.page_size
        self.use_graphs = groups.is_cuda if use_graphs is None else use_graphs
        self.buckets = list(buckets) if not isinstance(buckets, str) else BUCKETS[buckets](max_batch)
        self.exec = ExecCache(self, self.state)  # the serving layout's step executables, by bucket
        self.last_exec: StepExec | None = None  # the executable of the last decode rows run
        self.last_chunk_out: torch.Tensor | None = None  # [n, D] the last step's chunk rows, when it had some
        # replaced execs and states, each with the event after the last work that may read them:
        # kept until the device has passed it (in-flight replays), dropped by `reap_retired`
        self.retired: list = []
        self.seq_lens: dict[int, int] = {}
        self.order: list[int] = []  # requests that decode, in batch order
        self.prefilled: dict[int, int] = {}  # requests being prefilled -> tokens written (also seq_lens)
        self.owner_of: dict[int, int] = {}  # each request's owner as the caller keeps it (every layout)
        self.saved: dict[int, torch.Tensor] = {}  # preempted requests' KV, [L, n, C+R] on the host
        self.step_index = 0
        self.switch = None  # transitions.Transition while one is in flight
        self.side_stream = torch.cuda.Stream(device=dev) if groups.is_cuda else None

    # ---- bookkeeping -------------------------------------------------------------------------
    def resolve_layout(self, layout) -> ExecLayout:
        """`layout` as this group runs it: a name through `placements` (else the registry's placement
        on T ranks), a Placement or an ExecLayout; NotRunnable (one line) if no primitive runs it."""
        t = self.g.world_size
        if isinstance(layout, str) and layout in self.placements:
            layout = self.placements[layout]
        lay = exec_layout(layout, t)
        if lay.ranks != t:
            raise ValueError(f"layout {lay.name} is placed on {lay.ranks} ranks, the group has {t}")
        return lay

    def weight_slots_for(self, kind) -> int:
        return weight_slots_needed(self.resolve_layout(kind), self.head_bytes_full, self.g.world_size,
                                   self.page_bytes)

    @property
    def layout(self) -> str:
        return self.state.kind

    def add_requests(self, lengths: dict[int, int], owners: dict[int, int] | None = None) -> None:
        """Admit requests with `lengths[req]` tokens of history: synthetic, or the KV `save_request`
        kept for a preempted one. `owners`: each request's owner rank (owner layouts; default the
        least-loaded). During a switch the other layout's pages (the destination's, or on probation
        the fallback's) are written too."""
        tables = self._tables_written()
        self._assign_owners(lengths, owners, tables)
        for req, n in lengths.items():
            if req in self.seq_lens:
                raise ValueError(f"request {req} is already running")
            if self.switch is not None and self.switch.in_flight:
                self.switch.admitted(req)  # an incremental move writes it to both until the commit
            self.seq_lens[req] = n
            self.order.append(req)
            kept = self.saved.pop(req, None)
            if kept is not None and kept.shape[1] != n:
                raise ValueError(f"request {req} was saved with {kept.shape[1]} tokens, admitted with {n}")
            for ti, table in enumerate(tables):
                if ti and self._mirror() is not table:
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

    def _assign_owners(self, lengths: dict[int, int], owners: dict[int, int] | None, tables: list[PageTable]) -> None:
        """Each new request's owner rank (given, or the least-loaded by tokens: of the least-loaded
        owner group where the serving layout has 1 < G < T), in every table with owner groups."""
        load = [0] * self.g.world_size
        for req, rank in self.state.table.owners.items():
            load[rank] += self.seq_lens.get(req, 0)
        groups = self.state.layout.groups
        for req in sorted(lengths, key=lambda q: (-lengths[q], q)):
            rank = owners[req] if owners else least_loaded(load, groups)
            if owners:
                self.owner_of[req] = rank
            load[rank] += lengths[req]
            for table in tables:
                if table.layout.owned:
                    table.owners[req] = rank

    def begin_prefill(self, req: int, owner: int | None = None, expected_tokens: int = 1) -> None:
        """Start prefilling `req`: no KV yet; its chunks (`step(chunks=...)`) write its prompt's KV on
        the real layers. `owner`: its owner rank (owner layouts; default the least-loaded, counting
        `expected_tokens`)."""
        if req in self.seq_lens:
            raise ValueError(f"request {req} is already running")
        self._assign_owners({req: expected_tokens}, None if owner is None else {req: owner}, self._tables_written())
        if self.switch is not None and self.switch.in_flight:
            self.switch.admitted(req)
        self.seq_lens[req] = 0
        self.prefilled[req] = 0

    def finish_prefill(self, req: int) -> None:
        """`req`'s prompt is written: it decodes from its next position (joins `order`)."""
        if req not in self.prefilled:
            raise ValueError(f"request {req} is not being prefilled")
        del self.prefilled[req]
        self.order.append(req)

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
        if self.prefilled.pop(req, None) is None:
            self.order.remove(req)
        del self.seq_lens[req]
        self.owner_of.pop(req, None)

    def save_request(self, req: int) -> None:
        """Keep a request's KV on the host (every rank: a collective on the control group) and free
        its pages: a preempted request, admitted again later with the same history."""
        from .checks import collect_request_kv

        self.saved[req] = collect_request_kv(self, req)
        self.finish_request(req)

    def _mirror(self) -> PageTable | None:
        """The switch's other table while it is written: the destination's (an incremental move's
        while requests serve in it, failed or not), or on probation the fallback's."""
        sw = self.switch
        if sw is None:
            return None
        if sw.inc is not None and sw.landed and sw.in_flight:
            return sw.new.table
        return sw.mirror_table()

    def _tables_written(self) -> list[PageTable]:
        """The serving layout's table, and the switch's other one while it is written."""
        mirror = self._mirror()
        return [self.state.table] if mirror is None else [self.state.table, mirror]

    def _prepare_writes(self, runs: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
        """Allocate pages for this step's tokens, given as runs (request, first position, count)
        laid out row after row; return (row [n] into those rows, flat token idx [n]) of the latents
        this rank stores. A page both tables hold shares one slot, written once.
        NOTE: every decision (holders, slot, a move's landed set) is per (request, page), so a run
        is walked page by page, not token by token: a 2,048-token chunk was ~5 ms of host time
        per step token by token (benchmarks/results/executor_gpu/twin_1gpu/
        prefill_diag_h100_after_fix.json, the profile's `_prepare_writes` and `holders`)."""
        page, r = self.dims.page_size, self.g.rank
        rows, toks = [], []
        tables = self._tables_written()
        sw = self.switch
        inc = sw is not None and sw.inc is not None and sw.in_flight
        landed = sw.landed if inc else ()
        for table_i, table in enumerate(tables):
            if table_i and self._mirror() is not table:
                break  # the switch gave its pages back for the serving layout's (transitions.surrender)
            row = 0
            lost = False
            for req, pos0, n in runs:
                run_row, end = row, pos0 + n
                row += n
                if (req in landed) if not table_i else (inc and not sw.writes_new(req)):
                    continue  # an incremental move: a landed request's source, or a later group's destination
                held = table.pages.get(req, {})
                for lp in range(pos0 // page, (end - 1) // page + 1):
                    if r not in table.layout.holders(req, lp, table.owners):
                        continue
                    slot = held.get(lp)
                    shared = tables[0].pages.get(req, {}).get(lp) if table_i else None
                    if slot is None:
                        try:
                            slot = shared if shared is not None else self._new_slot(table_i > 0)
                        except OutOfPages as e:
                            if table_i == 0:
                                raise
                            self._mirror_lost(f"no memory for a new page of {table.kind}: {e}")
                            lost = True
                            break
                        table.add(req, lp, slot)
                        held = table.pages.get(req, {})
                    if shared is not None and shared == slot:
                        continue  # a slot both tables hold: written once, through the serving table
                    lo, hi = max(pos0, lp * page), min(end, (lp + 1) * page)
                    rows.extend(range(run_row + lo - pos0, run_row + hi - pos0))
                    toks.extend(range(slot * page + lo - lp * page, slot * page + hi - lp * page))
                if lost:
                    break
        return rows, toks

    def _host_work(self, decode: bool, chunks: list[tuple[int, int]]):
        """A step's host bookkeeping: pages for every new token, this step's decode executable (its
        batch's bucket; built unprepared if new) and the chunk's inputs. -> (decode writes, exec or
        None, ChunkInputs or None)."""
        dec = [(q, self.seq_lens[q]) for q in self.order] if decode else []
        pieces = []
        for q, n in chunks:
            if q not in self.prefilled:
                raise ValueError(f"request {q} is not being prefilled")
            pieces.append((q, self.prefilled[q], int(n)))
        rows, slots = self._prepare_writes([(q, pos, 1) for q, pos in dec] + pieces)
        b = len(dec)
        dec_w = ([i for i in rows if i < b], [s_ for i, s_ in zip(rows, slots) if i < b])
        ex = None
        sw = self.switch
        if b and sw is not None and sw.inc is not None and sw.in_flight and sw.landed:
            # an incremental move (transitions.py): the landed requests' rows run the destination's
            # executable, the others the source's. NOTE: decode rows are independent (each attends
            # its own KV; the FFN is per row), so the two sub-batches are the one batch's step
            split = self._split_rows(dec_w, sw)
            if split is not None:
                dec_w, ex = split
        if b and ex is None:
            key, graphed = self.exec.key(self.order, self.seq_lens)
            ex = self.exec.get(key, graphed)
        ch = None
        if pieces:
            ch = ChunkInputs(self.state.table, pieces, self.g.rank, self.dims.page_size,
                             ([i - b for i in rows if i >= b], [s_ for i, s_ in zip(rows, slots) if i >= b]),
                             self.g.device)
        return dec_w, ex, ch

    def _split_rows(self, dec_w, sw):
        """(per sub-batch writes, per sub-batch (order, executable, batch rows)) of a step whose
        decode rows serve in two layouts: the source's (rows not landed) and the destination's."""
        parts = []
        for cache, mine in ((self.exec, lambda q: not sw.serves_new(q)), (sw.new_exec, sw.serves_new)):
            idx = [i for i, q in enumerate(self.order) if mine(q)]
            if not idx:
                continue
            order = [self.order[i] for i in idx]
            key, graphed = cache.key(order, self.seq_lens)
            parts.append((order, cache.get(key, graphed), idx, cache))
        if len(parts) == 1 and parts[0][3] is self.exec:
            return None  # nothing landed decodes: the source's step
        writes = []
        for order, _, idx, _ in parts:
            at = {i: j for j, i in enumerate(idx)}
            w = [(at[i], s_) for i, s_ in zip(*dec_w) if i in at]
            writes.append(([a for a, _ in w], [b for _, b in w]))
        return writes, parts

    def build_exec(self, state: LayoutState, extra_pages: int = 0, prepare: bool = True) -> ExecCache:
        """The step executables of `state` (buckets.ExecCache); `prepare`: capture the current
        batch's bucket now (collectives on every rank).

        extra_pages: growth its block tables must allow for (a switch passes its copy steps).
        """
        page = self.dims.page_size
        longest = max([pages_for(self.seq_lens[q] + 1, page) for q in self.order] + [1])
        cache = ExecCache(self, state, min_cap=cap_bucket(longest + extra_pages))
        if prepare:
            self.prepare_current(cache)
        return cache

    def prepare_current(self, cache: ExecCache) -> StepExec | None:
        """Capture `cache`'s executable for the current decode batch (every rank at the same point)."""
        if not self.order:
            return None
        key, graphed = cache.key(self.order, self.seq_lens)
        return cache.prepare(key, graphed)

    def prepare_buckets(self, max_batch: int | None = None, max_context_tokens: int = 0) -> int:
        """Capture the serving layout's decode graph of every bucket up to `max_batch` (default the
        largest bucket) at the block-table width of `max_context_tokens`, at start-up, as engines
        do; returns the graphs captured. Owner layouts capture each bucket with every request on one
        owner (the widest owner shape; a more even batch takes its own key on first use)."""
        cache = self.exec
        if max_context_tokens:
            cache.min_cap = max(cache.min_cap, cap_bucket(pages_for(max_context_tokens + 1, self.dims.page_size)))
        top = max_batch or self.buckets[-1]
        before = cache.captures
        owner = self.state.layout.owned
        cache.prepare_keys([(b, b if owner else 0, cache.min_cap) for b in self.buckets if b <= top])
        return cache.captures - before

    def _forward(self, inp: StepInputs | None, ch: ChunkInputs | None = None) -> torch.Tensor:
        """Device work of one step: the decode rows of fixed-shape inputs `inp` (padded to their
        bucket), then the prefill chunk's rows `ch`. -> [rows + n, D] final residual."""
        dims = self.dims
        st = inp.state if inp is not None else self.state
        xs, ps = [], []
        if inp is not None:
            xs.append(token_embeddings(inp.req, inp.pos, dims.hidden_size, self.seed))
            ps.append(inp.pos)
        if ch is not None:
            xs.append(token_embeddings(ch.req, ch.pos, dims.hidden_size, self.seed))
            ps.append(ch.pos)
        x = (xs[0] if len(xs) == 1 else torch.cat(xs)).to(self.dtype)  # [rows + n, D]
        pos = ps[0] if len(ps) == 1 else torch.cat(ps)
        nd = inp.rows if inp is not None else 0
        attention = ATTENTION[st.layout.primitive]
        flat = self.pool.view(dims.num_layers, -1, dims.latent_dim)  # [L, P*page, C+R]
        fault = self._device_fault_layer()
        for layer in range(dims.num_layers):
            if layer == fault:  # NOTE: injected (Faults): this rank stops between two of the step's collectives
                raise RuntimeError(f"injected: the first step after the commit failed in its device work on "
                                   f"rank {self.g.rank} (layer {layer})")
            attn = self.replicated[layer]
            h = rms_norm(x, attn.attn_norm, dims.rms_eps)  # [rows + n, D]
            latent = kv_latent(h, attn, pos, dims)  # [rows + n, C+R]
            parts = []
            if inp is not None:
                flat[layer].index_copy_(0, inp.wtoks, latent[:nd].index_select(0, inp.wrows))  # padding -> trash
            if ch is not None:
                flat[layer].index_copy_(0, ch.wtoks, latent[nd:].index_select(0, ch.wrows))
            if inp is not None:
                parts.append(attention(h[:nd], attn, st.heads[layer], self.pool[layer], inp.batch, dims, self.g,
                                       self.kernel_config))
            if ch is not None:
                parts.append(chunk_attention(h[nd:], latent[nd:], attn, st.heads[layer], self.pool[layer], ch,
                                             dims, self.g))
            x = x + (parts[0] if len(parts) == 1 else torch.cat(parts))
            f = ffn_partial(x, self.ffn[layer], dims)  # [rows + n, D] partial over FFN columns
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
    def step(self, chunks: list[tuple[int, int]] = (), decode: bool = True) -> torch.Tensor:
        """One step: a decode token of every request in `order` (unless `decode` is False) and the
        prefill chunk `chunks` — (request, tokens) pieces of requests being prefilled, each continuing
        where its prefill stands. Returns the decode rows' final residual [B, D] (on CUDA with graphs
        a view of the graph's output buffer: clone it to keep it past the next step); the chunk rows'
        is `last_chunk_out` [n, D]. While a switch is copying or on probation, the host work is
        agreed on by every rank before the device work (transitions.Transition.guard), and any other
        failure of the step — a rank raising in its device work, a peer that died — is agreed within
        seconds (recovery.py): the switch is dropped and the step run again, or, a peer gone,
        dist.GroupLost is raised."""
        sw = self.switch
        if sw is not None:
            sw.before_step(self)
        if self.retired:
            self.reap_retired()
        chunks = [(int(q), int(n)) for q, n in chunks if n > 0]
        if sw is not None and sw.guarding:
            try:
                x = self._step_work(sw, decode, chunks)
            except (GroupLost, AgreedFailure):
                raise
            except Exception as exc:  # noqa: BLE001 - agreed by every rank in recover (or GroupLost)
                recover(self, exc)
                try:
                    x = self._step_work(None, decode, chunks)  # once more, in the layout the group agreed on
                finally:
                    bounded_waits(self.g, False)
        else:
            x = self._step_work(None, decode, chunks)
        b = len(self.order) if decode else 0
        if b:
            for q in self.order:
                self.seq_lens[q] += 1
        for q, n in chunks:
            self.prefilled[q] += n
            self.seq_lens[q] += n
        if sw is not None:
            sw.after_step(self)
        self.step_index += 1
        return x[:b] if x is not None else torch.zeros(0, self.dims.hidden_size, dtype=self.dtype, device=self.g.device)

    def _step_work(self, sw, decode: bool, chunks: list[tuple[int, int]]):
        """The step's host work (agreed on through `sw` when it guards) and its device work: the
        decode executable of its bucket (replayed, or eager with the chunk rows), or the chunk alone."""
        work = (lambda: self._host_work(decode, chunks))
        w, ex, ch = sw.guard(self, work) if sw is not None else work()
        if isinstance(ex, list):
            return self._mixed_work(w, ex, ch)
        rows, toks = w
        x = None
        if ex is not None:
            if ch is None and not ex.prepared and ex.prepare():
                self.exec.captures += 1  # a bucket met first here (collectives: every rank decides the same)
            ex.inputs.fill(self.order, self.seq_lens, rows, toks)
            x = ex.run() if ch is None else ex.run_eager(ch)
            self.last_exec = ex
        elif ch is not None:
            x = self._forward(None, ch)
        nd = ex.inputs.rows if ex is not None else 0
        self.last_chunk_out = x[nd:] if ch is not None else None
        return x

    def _mixed_work(self, writes: list, parts: list, ch):
        """The device work of a step served in two layouts (`_split_rows`): each sub-batch's
        executable over its rows (the prefill chunk, whose requests are the source's until the
        commit, with the source's), the rows put back in `order`. -> [B + n, D]."""
        b = len(self.order)
        out = None
        chunk_out = None
        for (w_rows, w_toks), (order, ex, idx, cache) in zip(writes, parts):
            with_chunk = ch is not None and cache is self.exec
            if not with_chunk and not ex.prepared and ex.prepare():
                cache.captures += 1
            ex.inputs.fill(order, self.seq_lens, w_rows, w_toks)
            x = ex.run_eager(ch) if with_chunk else ex.run()
            if out is None:
                out = torch.empty((b, x.shape[1]), dtype=x.dtype, device=x.device)
            out[torch.tensor(idx, dtype=torch.int64, device=x.device)] = x[:len(order)]
            if with_chunk:
                chunk_out = x[ex.inputs.rows:]
            self.last_exec = ex
        if ch is not None and chunk_out is None:  # every decode row landed: the chunk alone, in the source
            chunk_out = self._forward(None, ch)
        self.last_chunk_out = chunk_out
        return out if chunk_out is None else torch.cat([out, chunk_out])

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
                  after_commit: str = "rollback", groups: int = 1, order: str = "longest"):
        """Plan and begin a switch to `kind` at this batch boundary; returns the Transition. An
        owner destination keeps each request's owner as admitted (`owner_of`). `after_commit`: what
        a failure in the step after the commit does (transitions.py: "rollback" or "forward").
        `groups` > 1: an incremental move of that many groups of requests in `order` (the plan's
        `move_groups` and `move_order`: runtime_policy/transitions.py; transitions.py here)."""
        from .move_plan import plan_incremental
        from .transitions import Transition, plan_page_moves

        dst = self.resolve_layout(kind)
        if self.switch is not None and self.switch.in_flight:
            raise RuntimeError(f"a switch to {self.switch.plan.dst_kind} is already in flight")
        if self.switch is not None and self.switch.probation:
            self.switch._end_probation(self)  # committed at this boundary, no step since
        owners = self.owner_of if all(q in self.owner_of for q in self.seq_lens) else None
        inc, lens = None, dict(self.seq_lens)
        if groups > 1 and len(self.seq_lens) > 1:
            inc = plan_incremental(self.state.layout, dst, self.g.world_size, lens, dict(self.state.table.owners),
                                   self.dims.page_size, groups, order, owners)
            owners = inc.dst_owners if dst.owned else owners
            lens = {q: n for q, n in self.seq_lens.items() if q in inc.groups[0] or q in self.prefilled}
        plan = plan_page_moves(self.state.layout, dst, self.g.world_size, lens,
                               dict(self.state.table.owners), self.dims, self.pool.element_size(),
                               self.head_bytes_full, self.step_index, bytes_per_step, owners)
        self.switch = Transition(plan, faults, auto_commit, after_commit, inc=inc)
        self.switch.begin(self)
        return self.switch

    def commit_switch(self) -> None:
        """Hand off at this batch boundary (the switch is `ready`)."""
        if self.switch is None or not self.switch.ready:
            raise RuntimeError("no switch ready to commit")
        self.switch.commit(self)

    def finish_switch(self) -> None:
        """Commit the incremental move in flight with the groups landed so far (every request it
        lacks already finished or preempted: transitions.py `Transition.finish`)."""
        if self.switch is None or not self.switch.in_flight:
            raise RuntimeError("no switch in flight to finish")
        self.switch.finish(self)

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
        out = {}
        for q in self.seq_lens:  # decoding and being prefilled
            table = self.serving_table(q)
            out[q] = (sorted(table.pages.get(q, {})), gather_logical_kv(self.pool, table, q, self.seq_lens[q]).cpu())
        return out

    def serving_table(self, req: int) -> PageTable:
        """The table `req` is served from: the destination's once an incremental move landed it."""
        sw = self.switch
        if sw is not None and sw.inc is not None and sw.in_flight and sw.serves_new(req):
            return sw.new.table
        return self.state.table

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
            table = self.serving_table(req)
            for lp in range(pages_for(n, self.dims.page_size)):
                held = lp in table.pages.get(req, {})
                if held != table.holds(self.g.rank, self.g.world_size, req, lp):
                    raise AssertionError(f"request {req} page {lp} held={held} disagrees with layout "
                                         f"{table.kind}")

