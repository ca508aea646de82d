"""A heuristic that knows (``belady``) when each storage is used next.

h_DTR guesses the future from the past: staleness, the time since a storage's last
access, stands in for the time until its next one. This simulator heuristic replaces
that guess by the truth.

``belady`` is clairvoyant. A pre-pass over the trace (``next_uses``) lists, for each
storage, the instructions that use it (arguments of CALL and MUTATE, CONSTANT
annotations, and the end of the trace for outputs). While replaying, the score of
a candidate replaces staleness by the distance to its next use:

    score(t) = C(t) / (M(t) * D(t))

with C and M as in ``minidtr.runtime.heuristics`` and D(t) the distance until t, or
one of its evicted descendants (whose rebuild needs t), is next used: in instructions
of the trace (``ops``, the default) or in its compute (``time``). A storage
never used again has D = inf (score 0: evicted first). A dead storage (no references:
resident only because a rebuild needed it) has no use of its own and is scored by
staleness, as in h_DTR; scoring it 0 made belady thrash where h_DTR runs. Plain
farthest-next-use (Belady's rule for caches) is ``belady+none+nosize+ops``. No online
policy knows the next uses, so belady shows what better guessing can buy. It is a
clairvoyant *heuristic*, not a bound: Belady's rule is optimal for a cache, not for
rematerialization; belady plans one eviction at a time, and on some traces and budgets
h_DTR does better. The optimum for the trace's op order is the MILP of ``checkmate``
(proven only on small graphs); ``minidtr.sim.bound`` proves a lower bound on every
schedule, belady's included. Variants are named
``belady+<cost>+<size|nosize>+<ops|time>``; ``belady`` is ``belady+estar+size+ops``.

``learned`` (``minidtr.runtime.learned``) predicts the next uses instead, from the
training step before; it needs no trace, so it runs live as well as here.

``belady`` is built by ``simulate`` (``make_trace_heuristic``); ``minidtr.runtime``
refuses its name: a live run has no trace to read ahead in.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from ..runtime.heuristics import COST_TERMS, MIN_STALENESS, ScoreContext
from ..runtime.storage import Storage
from .trace import Call, Constant, Copy, CopyFrom, MakeConstant, Mutate, Release, Trace

TRACE_HEURISTICS = ("belady",)
BELADY_DEFAULT = ("estar", True, "ops")


@dataclass
class NextUses:
    """Which storage each name refers to, and when each storage is used.

    Storages are numbered by a *key* in order of creation. ``uses[key]`` lists the
    instruction positions that use it, ascending (``len(trace)`` for an output);
    ``created[p]`` lists the (name, key) pairs instruction ``p`` defines with a new
    storage; ``clock[p]`` is the trace's compute (sum of TIME) before instruction ``p``.
    """

    uses: list[list[int]]
    created: dict[int, list[tuple[str, int]]]
    clock: list[float]

    def next_use(self, key: int, position: int) -> int | None:
        """The first use of storage ``key`` at or after ``position``, or None."""
        uses = self.uses[key]
        i = bisect_left(uses, position)
        return uses[i] if i < len(uses) else None


def next_uses(trace: Trace) -> NextUses:
    """The pre-pass: follow names to storages as the replay does (a view or a COPY shares
    its source's storage; a MUTATE makes new ones) and list each storage's uses."""
    uses: list[list[int]] = []
    created: dict[int, list[tuple[str, int]]] = {}
    clock: list[float] = []
    key_of: dict[str, int] = {}
    now = 0.0

    def new(position: int, name: str) -> None:
        key_of[name] = len(uses)
        created.setdefault(position, []).append((name, len(uses)))
        uses.append([])

    def use(position: int, names) -> None:
        for key in {key_of[n] for n in names}:
            uses[key].append(position)

    for p, ins in enumerate(trace.instructions):
        clock.append(now)
        if isinstance(ins, Constant):
            new(p, ins.name)
        elif isinstance(ins, Call):
            use(p, ins.args)
            for r in ins.results:
                if r.alias < 0:
                    new(p, r.name)
                else:
                    key_of[r.name] = key_of[ins.args[r.alias]]
            now += ins.time
        elif isinstance(ins, Mutate):
            use(p, ins.args)
            for i in ins.mutate:
                new(p, ins.args[i])
            now += ins.time
        elif isinstance(ins, Copy | CopyFrom):
            key_of[ins.dst] = key_of[ins.src]
        elif isinstance(ins, MakeConstant):
            use(p, (ins.name,))
        elif isinstance(ins, Release):
            del key_of[ins.name]
    end = len(trace.instructions)
    clock.append(now)
    use(end, list(key_of))
    return NextUses(uses, created, clock)


def parse_variant(name: str) -> tuple[str, tuple]:
    """``belady`` or ``belady+<cost>+<size|nosize>+<time|ops>`` -> (family, parameters)."""
    parts = name.split("+")
    if parts == ["belady"]:
        return "belady", BELADY_DEFAULT
    if (
        len(parts) == 4
        and parts[0] == "belady"
        and parts[1] in COST_TERMS
        and parts[2] in ("size", "nosize")
        and parts[3] in ("time", "ops")
    ):
        return "belady", (parts[1], parts[2] == "size", parts[3])
    raise ValueError(
        f"unknown heuristic {name!r}; the trace heuristic is 'belady' or "
        f"'belady+<cost>+<size|nosize>+<time|ops>' with cost in {list(COST_TERMS)}"
    )


class TraceHeuristic:
    """A heuristic the replayer keeps informed: ``before(position, clock, ins, cells)``
    ahead of each instruction (``clock``: compute so far, recomputation excluded) and
    ``after(position, ins, cells)`` once it ran (``cells``: name -> Cell)."""

    name: str
    cost: str

    def before(self, position: int, clock: float, ins=None, cells=None) -> None:
        pass

    def after(self, position: int, ins, cells: dict) -> None:
        pass


class Belady(TraceHeuristic):
    """score = C / (M * distance to the next use); see the module docstring."""

    def __init__(self, name: str, trace: Trace, cost: str, size: bool, distance: str):
        self.name, self.cost, self.size, self.distance = name, cost, size, distance
        self.cost_term = COST_TERMS[cost]
        self.uses = next_uses(trace)
        self.key: dict[int, int] = {}  # allocator storage id -> trace storage key
        self.position = 0

    def before(self, position: int, clock: float, ins=None, cells=None) -> None:
        self.position = position

    def after(self, position: int, ins, cells: dict) -> None:
        for name, key in self.uses.created.get(position, ()):
            cell = cells.get(name)
            if cell is not None:
                self.key.setdefault(cell.storage.id, key)

    def next_use(self, storage_id: int) -> int | None:
        key = self.key.get(storage_id)
        return None if key is None else self.uses.next_use(key, self.position)

    def until_needed(self, storage: Storage, context: ScoreContext) -> float:
        """Distance to the first time ``storage`` is needed: its own next use, or that of
        an evicted descendant (whose rebuild would need it)."""
        nxt = self.next_use(storage.id)
        for member in context.descendant_ids(storage):
            use = self.next_use(member)
            if use is not None and (nxt is None or use < nxt):
                nxt = use
        if nxt is None:
            return math.inf
        if self.distance == "ops":
            return nxt - self.position + 1.0
        return self.uses.clock[nxt] - self.uses.clock[self.position]

    def score(self, storage: Storage, context: ScoreContext) -> float:
        if storage.external_refs == 0:
            # dead, resident only to rebuild others: no use of its own to look ahead to
            distance = context.clock - storage.last_access
        else:
            distance = self.until_needed(storage, context)
            if distance == math.inf:
                return 0.0
        value = self.cost_term(storage, context)
        if self.size:
            value /= max(storage.nbytes, 1)
        return value / max(distance, MIN_STALENESS)


def make_trace_heuristic(name: str, trace: Trace | None) -> TraceHeuristic | None:
    """The trace heuristic called ``name``, or None when ``name`` is a runtime heuristic."""
    if name.split("+")[0] not in TRACE_HEURISTICS:
        return None
    _, params = parse_variant(name)
    if trace is None:
        raise ValueError(f"{name!r} reads the trace's future: replay a whole trace")
    return Belady(name, trace, *params)
