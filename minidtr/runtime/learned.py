"""``learned``: a heuristic that learns when each storage is used next from the step before.

h_DTR guesses the future from the past: staleness, the time since a storage's last
access, stands in for the time until its next one. A training step repeats the one
before it, so a better guess is at hand: the k-th layer's activation in step 2 is used
when the k-th layer's activation in step 1 was used, counted from its creation.

``Learned`` watches the allocator as a trace recorder does (it is an allocator
observer, attached while its runtime is active) and gives each new storage a
*signature*: a number standing for the producing op's name, the output's index and
size, and the signatures of the op's input storages (a constant, such as a parameter
or a batch, stands for its size only: this step's parameters come from last step's
update). Its clock is the program's compute (``time``: the cost of the ops run so far,
recomputation excluded) or the number of ops run (``ops``). It notes each access of a
storage as an age on that clock, counted from the storage's creation; when the last
handle of a storage dies its ages are complete and become its signature's *profile*.
A later storage with that signature is then scored

    score(t) = C(t) / (M(t) * D(t)),   D(t) = d(t)**w * s(t)**(1 - w)

with C and M as in ``minidtr.runtime.heuristics``, d(t) the distance from now to the
next age in the profile, s(t) the storage's staleness on the same clock (the time
since its last access by the program) and w the weight of the prediction
(``PREDICTED``, unless the name gives another). Past the last age of its profile
nothing but a rebuild needs the storage; d(t) is then its signature's *period*, the time between
the creations of its last two storages (one training step, in a training loop): the
next storage like it is needed then, and until then only rebuilds of its evicted
descendants read it. Why not the prediction alone: with d(t) alone (``belady``'s rule)
and 0 past the last age, the ResNet at 0.2 of its peak paid 1.53 against h_DTR's 1.61,
but the U-Net thrashed at 0.2 where h_DTR runs, rebuilding its whole encoder (dead by
then, and evicted first when it was past its last use) for each gradient below it.
The staleness in D(t) keeps what h_DTR learned of the run so far, and ``PREDICTED``
(0.3) was chosen on the bundled models' three-step traces at ratios 0.15-0.3
(heuristics.md gives the figures). A storage with no profile (everything in the
first step) is scored by s(t) alone, so that predicted and guessed distances
compare; a dead storage (resident only because a rebuild needed it) by its
staleness as h_DTR measures it. So on a single step ``learned`` is h_DTR with
staleness measured on the program's clock, and from the second step on it looks
ahead. ``time`` is the default: with ``ops`` an op of a few additions counts as
much as a convolution, and on the seven bundled models it did worse.

Live and replayed runs see the same allocator events, so a replay of a recorded
trace makes the same decisions. Variants:
``learned+<cost>+<size|nosize>+<ops|time>[+<w>]``; ``learned`` is
``learned+estar+size+time+0.3``. What it keeps (a few numbers per live storage, a
profile and two clocks per signature, at most ``MAX_SIGNATURES``) is Python memory that no
budget counts; attaching an observer also turns off the runtime's fast path for plain
ops (``fast/hotpath.py``), so a step costs more wall time than under h_DTR. The
accelerated search (``fast/learned_search.py``) computes e* only for the candidates that
can win, as h_DTR's does.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any, NamedTuple

from .heuristics import COST_TERMS, MIN_STALENESS, ScoreContext
from .observers import Observer, add_observer, remove_observer
from .storage import Cell, Recipe, Storage

PREDICTED = 0.3  # the weight of the predicted distance against the staleness in D(t)
MAX_SIGNATURES = 1 << 18  # past this many, everything learned is forgotten (a program
# that never repeats itself, such as one tree after another, has nothing to learn)


class LearnedSettings(NamedTuple):
    """What a ``learned`` name says: the cost term, whether the score divides by the size,
    the clock (``time`` or ``ops``) and the weight of the prediction in D(t)."""

    cost: str = "estar"
    size: bool = True
    distance: str = "time"
    weight: float = PREDICTED


def parse_learned(name: str) -> LearnedSettings:
    """``learned`` or ``learned+<cost>+<size|nosize>+<ops|time>[+<weight>]``, the weight
    of the prediction in [0, 1] (``PREDICTED`` when left out)."""
    parts = name.split("+")
    if parts == ["learned"]:
        return LearnedSettings()
    if (
        len(parts) in (4, 5)
        and parts[0] == "learned"
        and parts[1] in COST_TERMS
        and parts[2] in ("size", "nosize")
        and parts[3] in ("ops", "time")
    ):
        weight = PREDICTED if len(parts) == 4 else _weight(parts[4])
        if weight is not None:
            return LearnedSettings(parts[1], parts[2] == "size", parts[3], weight)
    raise ValueError(
        f"unknown heuristic {name!r}; expected 'learned' or "
        f"'learned+<cost>+<size|nosize>+<ops|time>[+<weight in 0..1>]' with cost in "
        f"{list(COST_TERMS)}"
    )


def _weight(text: str) -> float | None:
    try:
        weight = float(text)
    except ValueError:
        return None
    return weight if 0.0 <= weight <= 1.0 else None


class Learned(Observer):
    """Next uses predicted from the last storage with the same signature (module
    docstring). Pass one instance to several runtimes in turn to learn across them (or
    nested: it watches until the last of them leaves)."""

    def __init__(self, name: str = "learned"):
        self.name = name
        self.cost, self.size, self.distance, self.weight = parse_learned(name)
        self.cost_term = COST_TERMS[self.cost]
        self.allocator: Any = None
        self.attached: list[Any] = []  # the allocator of each active runtime using it
        self.forget()

    def forget(self) -> None:
        """Start learning again from nothing."""
        self.numbers: dict[tuple, int] = {}  # a recipe -> its signature
        self.last_number = 0
        self.signature: dict[int, int] = {}  # storage id -> signature
        self.born: dict[int, float] = {}  # storage id -> clock at creation
        self.ages: dict[int, list[float]] = {}  # storage id -> its accesses so far
        self.profile: dict[int, list[float]] = {}  # signature -> a finished storage's ages
        self.made: dict[int, float] = {}  # signature -> clock at its last storage's creation
        self.period: dict[int, float] = {}  # signature -> clock between its last two
        self.ops = 0  # ops run (first computations and reads)
        self.compute = 0.0  # their cost
        self.predicted = self.fallbacks = 0  # scores given each way

    @property
    def formula(self) -> str:
        top = "c" if self.cost == "local" else f"C[{self.cost}]"
        w = f"{self.weight:g}"
        distance = f"d^{w} * s^(1-{w}) where d is predicted, else staleness s"
        return f"{top} / ({'m * ' if self.size else ''}{distance})"

    @property
    def clock(self) -> float:
        return float(self.ops) if self.distance == "ops" else self.compute

    # ---- attaching (Runtime.enter_on / leave) ------------------------------------------------

    def attach(self, allocator: Any) -> None:
        """Watch ``allocator``; what was learned on another allocator is forgotten (its
        storage ids mean nothing here)."""
        if self.allocator is not None and self.allocator is not allocator:
            self.forget()
        self.allocator = allocator
        self.attached.append(allocator)
        add_observer(allocator, self)

    def detach(self, allocator: Any) -> None:
        """Stop watching ``allocator`` once no active runtime on it uses this instance (an
        inner runtime that shares it leaves while the outer one still learns)."""
        if allocator in self.attached:
            self.attached.remove(allocator)
        if allocator not in self.attached:
            remove_observer(allocator, self)

    # ---- what the allocator reports ----------------------------------------------------------

    def on_constant(self, storage: Storage) -> None:
        self.ops += 1  # a constant is never evicted: nothing to learn of its accesses

    def on_compute(self, recipe: Recipe, cells: list[Cell]) -> None:
        for storage in recipe.parents:
            self._accessed(storage)
        parents = tuple(self._signature_as_input(s) for s in recipe.parents)
        for index, cell in enumerate(cells):
            storage = cell.storage
            # a view shares its base's storage; a constant output (an optimizer's update)
            # is never evicted
            if storage.id not in self.signature and storage.producer is not None:
                recipe_key = (recipe.op.name, index, storage.nbytes, parents)
                self._created(storage, self._number(recipe_key))
        self.ops += 1
        self.compute += recipe.run_cost

    def on_read(self, cell: Cell) -> None:
        self._accessed(cell.storage)
        self.ops += 1

    def on_make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        self._accessed(storage)

    def on_make_constant_if_resident(self, storage: Storage) -> None:
        self._accessed(storage)

    def on_death(self, storage: Storage) -> None:
        """The last handle died: its ages are complete, its signature's profile."""
        ages = self.ages.pop(storage.id, None)
        self.born.pop(storage.id, None)
        signature = self.signature.pop(storage.id, None)
        if ages is not None and signature is not None:
            self.profile[signature] = ages

    def _number(self, recipe: tuple) -> int:
        """The signature of ``recipe``: the same number for the same recipe (no hash, so
        no collision and no dependence on Python's hash seed)."""
        numbers = self.numbers
        number = numbers.get(recipe)
        if number is None:
            if len(numbers) >= MAX_SIGNATURES:
                numbers.clear()
                self.profile.clear()
                self.made.clear()
                self.period.clear()
            self.last_number += 1
            number = numbers[recipe] = self.last_number
        return number

    def _signature_as_input(self, storage: Storage) -> int:
        if storage.producer is None:
            return self._number(("constant", storage.nbytes))
        return self.signature.get(storage.id, 0)

    def _created(self, storage: Storage, signature: int) -> None:
        clock = self.clock
        last = self.made.get(signature)
        if last is not None and clock > last:
            self.period[signature] = clock - last
        self.made[signature] = clock
        self.signature[storage.id] = signature
        self.born[storage.id] = clock
        self.ages[storage.id] = []

    def _accessed(self, storage: Storage) -> None:
        ages = self.ages.get(storage.id)
        if ages is not None:
            ages.append(self.clock - self.born[storage.id])

    # ---- scoring -----------------------------------------------------------------------------

    def predicted_distance(self, storage: Storage) -> float | None:
        """d(t): compute (or ops) from now until the predicted next use of a live storage,
        its signature's period when past every age of its profile (inf if it has none:
        one storage of it so far); None without a profile."""
        signature = self.signature.get(storage.id, 0)
        profile = self.profile.get(signature)
        if profile is None:
            return None
        age = self.clock - self.born[storage.id]
        i = bisect_left(profile, age)
        if i < len(profile):
            return profile[i] - age
        return self.period.get(signature, math.inf)

    def staleness(self, storage: Storage) -> float:
        """s(t): the program's clock since its last access of a storage made while this
        heuristic watched."""
        ages = self.ages[storage.id]
        return self.clock - self.born[storage.id] - (ages[-1] if ages else 0.0)

    def look_ahead(self, storage: Storage, context: ScoreContext) -> tuple[float, bool]:
        """(D(t), whether it was predicted): the predicted distance weighed with the
        staleness, or the staleness alone on this clock (h_DTR's for a storage made
        before this heuristic watched, or dead)."""
        if storage.id not in self.born:
            return context.clock - storage.last_access, False
        staleness = self.staleness(storage)
        if storage.external_refs:
            distance = self.predicted_distance(storage)
            if distance is not None:
                distance = max(distance, MIN_STALENESS) ** self.weight
                return distance * max(staleness, MIN_STALENESS) ** (1.0 - self.weight), True
        return staleness, False

    def score(self, storage: Storage, context: ScoreContext) -> float:
        return divided(self.cost_term(storage, context), self.divisors(storage, context))

    def divisors(self, storage: Storage, context: ScoreContext) -> tuple[int | None, float]:
        """What the cost term is divided by: the size (None without the size term) and
        D(t), counted as a predicted or a guessed distance."""
        distance, predicted = self.look_ahead(storage, context)
        if predicted:
            self.predicted += 1
        else:
            self.fallbacks += 1
        return (max(storage.nbytes, 1) if self.size else None), max(distance, MIN_STALENESS)

    def terms(self, storage: Storage, context: ScoreContext) -> dict[str, float]:
        """The parts of the score, for the event log."""
        distance, predicted = self.look_ahead(storage, context)
        terms = {"cost": storage.cost, "nbytes": storage.nbytes}
        if predicted:
            terms["predicted distance"] = self.predicted_distance(storage)
            terms["staleness"] = self.staleness(storage)
            terms["distance"] = distance
        else:
            terms["staleness"] = distance
        return terms


def divided(value: float, divisors: tuple[int | None, float]) -> float:
    """``Learned.score`` from its cost term and ``Learned.divisors``."""
    size, distance = divisors
    if size is not None:
        value /= size
    return value / distance
