"""``RematMachine``: hypothesis drives a budgeted runtime step by step, next to a shadow.

A ``RuleBasedStateMachine`` whose rules are what a program does to a runtime: apply an
op, read a value, evict one, pin and unpin one, change the budget, drop a handle, run
backward, take an optimizer step. Every rule runs on the *budgeted* allocator (a runtime
with a drawn heuristic, deallocation policy and policy code, audited, under budgets the
rules set) and then on an unbounded *shadow* allocator, on the same values. After every
step:

- the budget holds: the counted resident bytes are within it;
- the counts are exact: the resident bytes are the constants', the pinned values' and
  the eviction candidates' (nothing is locked or being accessed between steps); at the
  end of each example a scan of every live storage finds the same totals;
- the values are the shadow's: every value read, every gradient, and at the end every
  value still held, bit for bit (and every recomputation gives the bits of the first
  computation: the runtime is audited).

A rule whose budgeted half raises ``BudgetError`` (a budget too small for that step)
leaves the machine as it was: the op's output is not kept, the leaves' gradients are
cleared on both sides, a pin or a budget change does not happen; the runtime must stay
usable for the next step.

Use it in a test module, as minidtr's own tests do (tests/test_machine.py)::

    from minidtr.testing import RematMachine

    TestRemat = RematMachine.TestCase  # collected by pytest (or unittest)

and subclass it to draw from other ops (``OPS``: names ``minidtr.testing.programs.
apply_named`` knows), other sizes (``SIZE``) or more leaves (``LEAVES``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

from ..autograd import no_grad
from ..ops.op import as_constants
from ..runtime import BudgetError, Runtime, registry
from ..runtime.allocator import Allocator
from ..runtime.heuristics import HEURISTIC_NAMES
from ..runtime.runtime import DEALLOC_POLICIES
from ..runtime.storage import Storage
from ..tensor import Tensor, tensor
from .equivalence import first_difference
from .programs import BINARY, UNARY, apply_named

Pair = tuple[Tensor, Tensor]  # (on the budgeted allocator, on the shadow)


def machine_ops() -> st.SearchStrategy[str]:
    """A name from the running machine's ``OPS``, read when drawn: a rule's strategies are
    made once, in ``RematMachine``'s class body, where ``OPS`` is the base class's own."""
    return st.runner().flatmap(lambda machine: st.sampled_from(machine.OPS))


class RematMachine(RuleBasedStateMachine):
    """See the module docstring."""

    OPS: tuple[str, ...] = UNARY + BINARY
    SIZE = 4
    LEAVES = 2

    values = Bundle("values")

    def __init__(self) -> None:
        super().__init__()
        self.saved = registry.installed()
        self.budgeted = Allocator("cpu")
        self.shadow = Allocator("cpu")
        registry.install("cpu", self.budgeted)
        self.runtime: Runtime | None = None
        self.pairs: dict[int, Pair] = {}
        self.leaves: list[Pair] = []
        self.pinned: set[int] = set()
        self.made = 0

    def both(self, step: Callable[[int], Any]) -> tuple[Any, Any] | None:
        """``step(0)`` on the budgeted allocator, then ``step(1)`` on the shadow; None (the
        shadow left alone) when the budgeted step raised ``BudgetError``."""
        try:
            budgeted = step(0)
        except BudgetError:
            return None
        registry.install("cpu", self.shadow)
        try:
            return budgeted, step(1)
        finally:
            registry.install("cpu", self.budgeted)

    def keep(self, pair: Pair | None) -> Any:
        if pair is None:
            return multiple()
        self.made += 1
        self.pairs[self.made] = pair
        return self.made

    # ---- rules --------------------------------------------------------------------------

    @initialize(
        target=values,
        heuristic=st.sampled_from(HEURISTIC_NAMES),
        dealloc=st.sampled_from(DEALLOC_POLICIES),
        reference=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def start(self, heuristic: str, dealloc: str, reference: bool, seed: int) -> Any:
        self.runtime = Runtime(
            heuristic=heuristic, dealloc=dealloc, cost="flops", reference=reference, audit=True
        )
        self.runtime.enter_on(self.budgeted)
        rng = np.random.default_rng(seed)
        keys = []
        for _ in range(self.LEAVES):
            array = rng.standard_normal((self.SIZE, self.SIZE)) * 0.5
            pair = self.both(lambda side, a=array: tensor(a, requires_grad=True))
            self.leaves.append(pair)
            keys.append(self.keep(pair))
        return multiple(*keys)

    @rule(target=values, name=machine_ops(), a=values, b=values)
    def apply_op(self, name: str, a: int, b: int) -> Any:
        if a not in self.pairs or b not in self.pairs:
            return multiple()
        inputs = [self.pairs[a]] if name in UNARY else [self.pairs[a], self.pairs[b]]
        seed = self.made
        made = self.both(lambda side: apply_named(name, [p[side] for p in inputs], seed))
        return self.keep(made)

    @rule(key=values)
    def read(self, key: int) -> None:
        if key in self.pairs:
            pair = self.pairs[key]
            read = self.both(lambda side: pair[side].numpy())
            if read is not None:
                self.same([("value", read[0])], [("value", read[1])], f"value {key}")

    @rule(key=values)
    def evict(self, key: int) -> None:
        storage = self.pairs[key][0].cell.storage if key in self.pairs else None
        if storage is not None and evictable(storage):
            self.budgeted.evict(storage, reason="test")

    @rule(key=values)
    def pin(self, key: int) -> None:
        if key in self.pairs and key not in self.pinned:
            try:
                self.pairs[key][0].pin()
            except BudgetError:
                return
            self.pinned.add(key)

    @rule(key=values)
    def unpin(self, key: int) -> None:
        if key in self.pinned:
            self.pairs[key][0].unpin()
            self.pinned.discard(key)

    @rule(matrices=st.none() | st.integers(0, 12))
    def set_budget(self, matrices: int | None) -> None:
        """A budget of the constants and pinned values, and room for ``matrices`` more."""
        ledger = self.budgeted.ledger
        room = None if matrices is None else matrices * self.SIZE * self.SIZE * 8
        budget = None if room is None else ledger.constant_bytes + ledger.pinned_bytes + room
        try:
            self.runtime.budget = budget
        except BudgetError:
            pass  # the runtime keeps its budget

    @rule(key=consumes(values))
    def drop(self, key: int) -> None:
        if key in self.pairs:
            if key in self.pinned:
                self.unpin(key)
            del self.pairs[key]

    @rule(key=values)
    def backward(self, key: int) -> None:
        if key not in self.pairs or not self.pairs[key][0].requires_grad:
            return
        pair = self.pairs[key]
        if self.both(lambda side: pair[side].sum().backward(retain_graph=True)) is None:
            for leaf in self.leaves:  # a partial backward: start the gradients again
                leaf[0].grad = leaf[1].grad = None
            return
        for i, (a, b) in enumerate(self.leaves):
            grads = self.both(lambda side, leaf=(a, b): grad_of(leaf[side]))
            if grads is not None:
                self.same([("grad", grads[0])], [("grad", grads[1])], f"gradient of leaf {i}")

    @rule()
    def optimizer_step(self) -> None:
        for leaf in self.leaves:
            if leaf[0].grad is not None and leaf[1].grad is not None:
                self.both(lambda side, leaf=leaf: sgd(leaf[side]))

    # ---- invariants -----------------------------------------------------------------------

    @invariant()
    def within_budget(self) -> None:
        budget = self.budgeted.budget
        memory = self.budgeted.memory
        assert budget is None or memory <= budget, f"{memory:,} bytes resident, budget {budget:,}"

    @invariant()
    def counts_add_up(self) -> None:
        allocator = self.budgeted
        assert not allocator.busy and allocator.accesses == 0
        candidates = allocator.eviction.candidates
        if getattr(candidates, "listing", True) is False:
            return  # the accelerator lists candidates only under a budget (scan at the end)
        listed = list(candidates)
        assert all(s.locks == 0 and s.buffer is not None for s in listed)
        ledger = allocator.ledger
        expected = ledger.constant_bytes + ledger.pinned_bytes + sum(s.nbytes for s in listed)
        assert ledger.memory == expected, (
            f"resident {ledger.memory:,} bytes, but constants {ledger.constant_bytes:,} + "
            f"pinned {ledger.pinned_bytes:,} + candidates {expected - ledger.constant_bytes:,}"
        )

    def teardown(self) -> None:
        try:
            if self.runtime is not None and self.runtime.active:
                self.check_totals()
                for key, pair in self.pairs.items():
                    values = self.both(lambda side, pair=pair: pair[side].numpy())
                    if values is not None:
                        self.same([("v", values[0])], [("v", values[1])], f"value {key}")
                self.runtime.leave()
        finally:
            registry.restore(self.saved)

    def check_totals(self) -> None:
        """Every live storage of the budgeted allocator, found among all objects, adds up to
        the ledger's counts."""
        gc.collect()
        storages = [o for o in gc.get_objects() if type(o) is Storage]
        mine = [s for s in storages if s.allocator is self.budgeted and s.buffer is not None]
        ledger = self.budgeted.ledger
        counted = (
            ("resident", sum(s.nbytes for s in mine), ledger.memory),
            ("constant", sum(s.nbytes for s in mine if s.op is None), ledger.constant_bytes),
            (
                "pinned",
                sum(s.nbytes for s in mine if s.pinned and s.op is not None),
                ledger.pinned_bytes,
            ),
        )
        for what, found, ledgered in counted:
            assert found == ledgered, (
                f"{what} bytes: the live storages hold {found:,}, the ledger counts {ledgered:,}"
            )

    def same(self, budgeted: list, shadow: list, what: str) -> None:
        difference = first_difference(shadow, budgeted)
        assert difference is None, f"{what} differs from the unbounded shadow's: {difference}"


def evictable(storage: Storage) -> bool:
    return (
        storage.buffer is not None
        and storage.op is not None
        and not storage.pinned
        and not storage.locks
        and not storage.banished
    )


def grad_of(leaf: Tensor) -> np.ndarray:
    return leaf.grad.numpy() if leaf.grad is not None else np.array(np.nan)


def sgd(leaf: Tensor, lr: float = 0.1) -> None:
    with no_grad(), as_constants():
        leaf.assign(leaf - leaf.grad * lr)
    leaf.grad = None
