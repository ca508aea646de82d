"""Step 0: micro-DTR, the whole of DTR on scalars (docs/course/step0_micro.md).

Fill in the three methods at the end of MicroRuntime (score, make_room,
rematerialize), then check your work:

    python -m minidtr.course check 0


Every value remembers how it was made (its op and parent values), so the runtime
may drop its number to stay under a budget and compute it again when it is
needed. Which value goes is decided by the paper's h_DTR score. The grader runs
the same programs on minidtr (0-d float64 tensors, 8 bytes each, every op costing
1) and compares every decision.
"""

from __future__ import annotations

import math

NBYTES = 8  # a float64
COST = 1.0  # every op costs one tick of the clock
MIN_STALENESS = 1e-9  # the staleness of a value used at this very tick
OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a: -a,
    "tanh": math.tanh,
    "sigmoid": lambda a: 1.0 / (1.0 + math.exp(-a)),
}


class BudgetError(MemoryError):
    """Nothing more can be evicted and the value still does not fit."""


class Value:
    """A scalar that may be evicted: its number (None while evicted) and its recipe."""

    def __init__(self, id: int, data: float, op: str | None, inputs: tuple, clock: float):
        self.id = id
        self.data: float | None = data
        self.op = op  # None: a constant (a leaf), never evicted
        self.inputs = inputs  # what the op read, in order (x + x reads x twice)
        self.parents = tuple(dict.fromkeys(inputs))  # the distinct values it read
        self.children: list[Value] = []
        self.cost = COST if op else 0.0
        self.nbytes = NBYTES
        self.last_access = clock
        self.locks = 0
        for parent in self.parents:
            parent.children.append(self)

    @property
    def evicted(self) -> bool:
        return self.data is None


class MicroRuntime:
    def __init__(self, budget: int | None = None):
        self.budget = budget
        self.memory = 0
        self.peak = 0
        self.clock = 0.0
        self.next_id = 0
        self.candidates: dict[Value, None] = {}  # evictable residents, oldest first
        self.events: list[dict] = []  # what happened, as minidtr's event log says it

    # ---- the program's side: make values, apply ops, read ------------------------------

    def leaf(self, x: float) -> Value:
        self.reserve(NBYTES)
        return self.new(float(x), None, ())

    def apply(self, op: str, *inputs: Value) -> Value:
        locked = self.access(tuple(dict.fromkeys(inputs)))  # each distinct input once
        self.reserve(NBYTES)
        data = OPS[op](*(v.data for v in inputs))
        self.clock += COST
        out = self.new(data, op, inputs)
        self.unlock(locked)
        return out

    def read(self, v: Value) -> float:
        locked = self.access((v,))
        data = v.data
        self.unlock(locked)
        return data

    def new(self, data: float, op: str | None, inputs: tuple) -> Value:
        self.next_id += 1
        v = Value(self.next_id, data, op, inputs, self.clock)
        if op is not None:
            self.candidates[v] = None
        self.log("alloc", v)
        return v

    def log(self, kind: str, v: Value) -> None:
        """An event: ``kind`` (alloc, evict, remat) happened to ``v``."""
        op = v.op or "constant"
        self.events.append(
            {"event": kind, "id": v.id, "op": op, "nbytes": v.nbytes, "clock": self.clock}
        )

    def reserve(self, nbytes: int) -> None:
        if self.budget is not None and self.memory + nbytes > self.budget:
            self.make_room(self.budget - nbytes)
        self.memory += nbytes
        self.peak = max(self.peak, self.memory)

    # ---- accessing values: lock them, rebuilding the evicted ones ---------------------

    def access(self, values: tuple, used: bool = True) -> list[Value]:
        """Lock ``values`` for an op, rebuilding the evicted ones first. When the program
        uses them (``used``; not when a rebuild reads them) every value is marked used
        when asked for; the evicted ones are rebuilt the one with the largest evicted
        ancestry first (the newest among equals), each locked as it comes back; the
        resident ones are locked last, once everything is back (those evicted
        meanwhile, to make room for the rebuilds, are rebuilt first)."""
        if used:
            for v in values:
                v.last_access = self.clock
        locked: list[Value] = []
        waiting = list(values)
        while waiting:
            evicted = sorted((v for v in waiting if v.evicted), key=self.rebuild_need)
            if not evicted:
                break
            waiting = [v for v in waiting if not v.evicted]
            while evicted:
                v = evicted.pop()
                if v.evicted:
                    self.rematerialize(v)
                self.lock(v, locked)
        for v in waiting:
            self.lock(v, locked)
        return locked

    def rebuild_need(self, v: Value) -> tuple[int, int]:
        """The bytes of ``v`` and its evicted ancestry, then its id."""
        seen, stack = set(), [v]
        while stack:
            u = stack.pop()
            if u.id not in seen:
                seen.add(u.id)
                stack.extend(p for p in u.parents if p.evicted)
        return NBYTES * len(seen), v.id

    def lock(self, v: Value, locked: list[Value]) -> None:
        v.locks += 1
        locked.append(v)

    def unlock(self, locked: list[Value]) -> None:
        for v in locked:
            v.locks -= 1

    # ---- the three methods of the step ------------------------------------------------

    def score(self, v: Value) -> float:
        """h_DTR(v) = (c(v) + c(e*(v))) / (m(v) * s(v)).

        c(v) is ``v.cost``, m(v) is ``v.nbytes``, and the staleness s(v) is
        ``self.clock - v.last_access``, but never less than MIN_STALENESS (a value used
        at this very tick would divide by zero). e*(v) is v's evicted neighbourhood: the
        evicted values reachable from v through evicted parents (what rebuilding v
        would rebuild first), plus those reachable through evicted children (what
        would need v to be rebuilt), each counted once. c(e*(v)) is their summed cost.
        """
        # TODO(step 0): walk the evicted ancestors and descendants, then the formula.
        raise NotImplementedError("MicroRuntime.score")

    def make_room(self, target: int) -> None:
        """Evict until at most ``target`` bytes are resident.

        Each round, score every candidate that is not locked (``v.locks == 0``) and
        evict the one with the lowest score; among equal scores, the one that became a
        candidate first (``self.candidates`` keeps that order). To evict: drop the
        number (``v.data = None``), take its bytes off ``self.memory``, remove it from
        the candidates and ``self.log("evict", v)``. When no candidate is left to
        evict, raise ``BudgetError``.
        """
        # TODO(step 0): the loop.
        raise NotImplementedError("MicroRuntime.make_room")

    def rematerialize(self, v: Value) -> None:
        """Compute the evicted value ``v`` again.

        Its parents must be resident and locked while its op runs:
        ``self.access(v.parents, used=False)`` does that (rebuilding evicted parents
        first, by calling this method) and returns what it locked, to ``self.unlock``
        afterwards; a rebuild is not a use by the program, so it marks nothing used.
        Then, as ``apply`` does for a new value: make room for its bytes
        (``self.reserve``), run ``OPS[v.op]`` on its inputs' numbers (``v.inputs``, in
        order) and advance the clock by its cost; ``v.last_access`` stays when the
        program last used it. It is a candidate again (the newest one) and the log
        says ``self.log("remat", v)``.
        """
        # TODO(step 0): lock the parents, recompute, put it back.
        raise NotImplementedError("MicroRuntime.rematerialize")
