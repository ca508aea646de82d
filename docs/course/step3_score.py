"""Step 3: the score and its terms (docs/course/step3_score.md).

Fill in ``score`` below, then check your work:

    python -m minidtr.course check 3

Every heuristic of the paper is one formula with three switchable terms,

    score(t) = C(t) / (M(t) * S(t))

and the lowest score is evicted first.
"""

from __future__ import annotations

from minidtr.runtime.heuristics import MIN_STALENESS, ScoreContext  # noqa: F401
from minidtr.runtime.storage import Storage


def score(
    storage: Storage,
    context: ScoreContext,
    cost: str = "estar",
    size: bool = True,
    staleness: bool = True,
) -> float:
    """The score of ``storage`` now; with the defaults, h_DTR = (c + c(e*)) / (m * s).

    C, the cost term, by ``cost`` (c(t) is ``storage.cost``):

    - ``"estar"``: c(t) + c(e*(t)), with c(e*(t)) = ``context.estar(storage)``
    - ``"eq"``: c(t) + c(eq(t)), with ``context.eq(storage)`` (h_DTR^eq's classes)
    - ``"local"``: c(t)
    - ``"ancestors"``: c(t) + ``context.ancestors(storage)`` (h_MSPS)
    - ``"none"``: 1

    M is m(t) = ``storage.nbytes`` (at least 1) when ``size``, else 1. S is the
    staleness ``context.clock - storage.last_access`` when ``staleness``, else 1;
    a storage used at this very tick has staleness 0, so S is at least
    ``MIN_STALENESS``.
    """
    # TODO(step 3)
    raise NotImplementedError("score")
