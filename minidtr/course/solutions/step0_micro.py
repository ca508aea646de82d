"""Step 0: micro-DTR, the whole of DTR on scalars (a reference solution).

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

    # ---- the three functions of the step ---------------------------------------------

    def score(self, v: Value) -> float:
        """h_DTR(v) = (c(v) + c(e*(v))) / (m(v) * s(v)), staleness at least MIN_STALENESS."""
        neighbourhood = walk(v, "parents") + walk(v, "children")
        top = v.cost + sum(u.cost for u in neighbourhood)
        return top / (v.nbytes * max(self.clock - v.last_access, MIN_STALENESS))

    def make_room(self, target: int) -> None:
        """Evict the unlocked candidate with the lowest score (the oldest among equals)
        until at most ``target`` bytes are resident."""
        while self.memory > target:
            best, best_score = None, math.inf
            for v in self.candidates:
                if v.locks:
                    continue
                s = self.score(v)
                if best is None or s < best_score:
                    best, best_score = v, s
            if best is None:
                raise BudgetError(f"{target} bytes cannot be met: nothing more can be evicted")
            best.data = None
            self.memory -= best.nbytes
            del self.candidates[best]
            self.log("evict", best)

    def rematerialize(self, v: Value) -> None:
        """Compute an evicted value again from its parents (rebuilding evicted parents
        first: ``access`` does), and put it back among the candidates."""
        locked = self.access(v.parents, used=False)  # a rebuild is not a use
        self.reserve(v.nbytes)
        v.data = OPS[v.op](*(u.data for u in v.inputs))
        self.clock += v.cost
        self.candidates[v] = None
        self.log("remat", v)
        self.unlock(locked)


def walk(v: Value, direction: str) -> list[Value]:
    """The evicted values reachable from ``v`` through evicted ``parents`` or
    ``children``, each once."""
    found: dict[int, Value] = {}
    stack = [u for u in getattr(v, direction) if u.evicted]
    while stack:
        u = stack.pop()
        if u.id not in found:
            found[u.id] = u
            stack.extend(w for w in getattr(u, direction) if w.evicted)
    return list(found.values())
