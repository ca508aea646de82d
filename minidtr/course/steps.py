"""The course's steps: what each teaches, its files, and the time it takes (an estimate).

Each step has a page and a skeleton in docs/course/ (``stepN_<slug>.md``,
``stepN_<slug>.py``), a reference solution in ``minidtr/course/solutions/`` and a
grader, ``minidtr/course/grade_stepN.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
REPOSITORY = PACKAGE.parents[1]  # where docs/course is, in a clone of the repository
DOCS = REPOSITORY / "docs" / "course"


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    title: str
    minutes: int  # an estimate for a student who knows autodiff and has read the page
    teaches: str
    writes: tuple[str, ...]  # the functions the student fills in
    needs: tuple[str, ...] = ()  # what its grader imports beyond hypothesis (in '.[course]')

    @property
    def name(self) -> str:
        return f"step{self.number}_{self.slug}"

    @property
    def skeleton(self) -> Path:
        return DOCS / f"{self.name}.py"

    @property
    def page(self) -> Path:
        return DOCS / f"{self.name}.md"

    @property
    def solution(self) -> Path:
        return PACKAGE / "solutions" / f"{self.name}.py"

    @property
    def grader(self) -> str:
        return f"minidtr.course.grade_step{self.number}"


STEPS = (
    Step(
        0,
        "micro",
        "micro-DTR: the whole idea on scalars",
        60,
        "a budget, eviction by h_DTR, rematerialization on access, in one small file whose "
        "decisions match minidtr's event for event",
        ("MicroRuntime.score", "MicroRuntime.make_room", "MicroRuntime.rematerialize"),
    ),
    Step(
        1,
        "storages",
        "storages and recipes",
        30,
        "what the runtime keeps of each value: a buffer that may be dropped and a recipe "
        "that recomputes it bit for bit; which storages can be evicted; what the budget counts",
        ("recompute", "is_candidate", "resident_bytes"),
    ),
    Step(
        2,
        "eviction",
        "the budget check and the eviction loop",
        40,
        "making room: the lowest score goes first, locked values never, ties to the oldest "
        "candidate, and a clear error when nothing more can go",
        ("choose_victim", "make_room"),
    ),
    Step(
        3,
        "score",
        "the score and its terms",
        30,
        "h_DTR and the paper's other heuristics as one formula with switchable terms: cost, "
        "neighbourhood, size, staleness",
        ("score",),
    ),
    Step(
        4,
        "estar",
        "e* as a walk",
        35,
        "the evicted neighbourhood: what evicting a value puts at risk, up through evicted "
        "parents and down through evicted children",
        ("evicted_ancestors", "evicted_descendants", "estar_cost"),
    ),
    Step(
        5,
        "remat",
        "rematerialization: cascades and locking",
        75,
        "rebuilding what an access reads, inputs first and recursively, locking each input "
        "as it comes back so that making room for the next never evicts it",
        ("lock", "rematerialize"),
    ),
    Step(
        6,
        "dealloc",
        "deallocation: eager, banish, orphans",
        60,
        "what happens when the program drops its last reference: the paper's three "
        "policies, and why eager eviction must first rebuild orphans",
        ("apply_policy", "orphans_of", "useful_dead"),
    ),
    Step(
        7,
        "figure2",
        "heuristics compared in the simulator",
        45,
        "replaying recorded training steps under many budgets and heuristics, and reading "
        "the result against the paper's Figure 2",
        ("slowdowns", "lowest_ratio", "figure2"),
        ("matplotlib",),
    ),
)


def step(number: int) -> Step:
    """The step numbered ``number``; ``ValueError`` with the valid numbers otherwise."""
    for s in STEPS:
        if s.number == number:
            return s
    raise ValueError(
        f"there is no step {number}: the steps are {STEPS[0].number} to {STEPS[-1].number} "
        "(python -m minidtr.course list)"
    )
