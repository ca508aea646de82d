"""``minidtr explain``: what the runtime did, in plain words, from its event log.

The log (``Runtime(record_events=True)``, ``rt.export_events(path)``) holds one
JSON object per line: ``alloc``, ``evict`` (with ``reason``, and for budget
evictions the ``score``, the ``runner_up`` and the lowest-scoring
``candidates`` with their score terms), ``remat`` (with its ``cascade``: the
access that triggered it and the ``parent`` storage it was rebuilt for),
``free`` and ``banish``, each with the storage ``id``, the ``op`` that made it,
``nbytes``, the logical ``clock`` and the runtime's ``memory`` after the event
(an ``alloc`` or ``remat`` whose kernel needed scratch memory carries its
``workspace``: memory stood that much higher while the kernel ran; any event
may carry the ``view_cost`` of the view ops run since the one before, which
have no event of their own); and ``step`` marks (``Runtime.mark_step``,
written by ``minidtr train``). An optional first line ``{"event": "runtime",
...}`` (written by ``minidtr train`` and ``export_events``) carries the budget and
the policy, and the ``end_view_cost`` of the view ops run after the last event.

A rematerialization is one recipe replayed (one recomputed op), as the
runtime's ``stats()["remats"]`` and the simulator count it. The log has one
``remat`` event per storage the replay refilled; the events of one replay
share its ``replay`` number (the runtime's remat count after it), so an op
with several outputs is one rematerialization here too.

``summarize`` replays the log to rebuild what was resident at every moment, so
it can say what filled memory at the peak as well as what was evicted and what
recomputing it cost.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from .event_log import (  # noqa: F401  (read here by the command and the tests)
    EVENT_KINDS,
    EventLogError,
    check_events,
    load_events,
)
from .reading import printable
from .runtime.arena import aligned

ORPHAN_TRIGGER = "orphans of "  # how the remats of an orphan rebuild name their trigger


def clock_unit(cost: str | None) -> str:
    """What the logical clock counts under a cost model (the header's ``cost``)."""
    if cost == "flops":
        return (
            "estimated ns (cost=flops: each op counts flops/32 + bytes moved/8, "
            "the same on every machine)"
        )
    if cost == "time":
        return "measured ns (cost=time: each op's kernel time)"
    if cost:
        return f"the units of the cost function {printable(str(cost))}"
    return "op costs (the log has no header, so the cost model is not known)"


ORPHAN_NOTE = (
    "an orphan is an evicted tensor still in use whose parent has just died; it is "
    "rebuilt from that parent before the parent is freed, so that its later rebuild "
    "does not have to replay the dead chain above it"
)


@dataclass
class Decision:
    """One budget eviction: the victim, its score and the runner-up's."""

    clock: float
    id: int
    op: str
    nbytes: int
    score: float
    runner_up_id: int | None
    runner_up_score: float | None
    needed_by: str | None = None  # the op whose allocation this eviction made room for


@dataclass
class Addresses:
    """What a log of ``fit="contiguous"`` says of the arena: the highest end address of a
    block (its address plus its size rounded up to the alignment), the evictions made to
    free a block, those of them made while the bytes alone already fitted (``extra``),
    and the fragmentation of the free memory (1 - largest free block / free bytes) at
    each of those evictions."""

    peak_address: int = 0
    evictions: int = 0
    extra: int = 0
    fragmentation: list[float] = field(default_factory=list)

    def note(self, event: dict[str, Any]) -> None:
        if event.get("address") is not None and event["event"] in ("alloc", "remat"):
            end = event["address"] + aligned(event["nbytes"])
            self.peak_address = max(self.peak_address, end)
        if event["event"] == "evict" and "largest_free" in event:
            self.evictions += 1
            self.extra += bool(event.get("extra"))
            free = event.get("free_bytes") or 0
            self.fragmentation.append(1 - event["largest_free"] / free if free else 0.0)


@dataclass
class Summary:
    runtime: dict[str, Any]
    counts: Counter
    evictions_by_reason: Counter
    budget_evictions_by_op: Counter
    evicted_bytes_by_op: Counter
    remats_by_op: Counter
    remat_cost_by_op: Counter
    remats_by_storage: Counter
    storage_op: dict[int, str]
    storage_bytes: dict[int, int]
    compute_cost: float
    remat_cost: float
    peak_memory: int
    peak_clock: float
    peak_event: dict[str, Any] | None
    peak_resident_by_op: Counter
    decisions: list[Decision] = field(default_factory=list)
    end_clock: float = 0.0
    start_clock: float = 0.0
    step_clocks: list[float] = field(default_factory=list)
    orphan_remats: int = 0
    remats: int = 0  # rematerializations: recipes replayed (see the module docstring)
    workspace_by_op: Counter = field(default_factory=Counter)  # the largest, per op
    peak_workspace: int = 0  # the workspace of the kernel running at the peak (in it)
    addresses: Addresses | None = None  # under fit="contiguous"

    @property
    def budget(self) -> int | None:
        return self.runtime.get("budget")


def summarize(events: list[dict[str, Any]]) -> Summary:
    """Replay the log: counts per event kind and per op, costs, the peak and what was
    resident there, and every budget eviction decision."""
    runtime: dict[str, Any] = {}
    counts: Counter = Counter()
    by_reason: Counter = Counter()
    evicted_by_op: Counter = Counter()
    evicted_bytes: Counter = Counter()
    remats_by_op: Counter = Counter()
    remat_cost_by_op: Counter = Counter()
    remats_by_storage: Counter = Counter()
    storage_op: dict[int, str] = {}
    storage_bytes: dict[int, int] = {}
    resident: dict[int, tuple[str, int]] = {}
    # (op, bytes gained or lost) per change of ``resident``, replayed up to the peak's
    # change at the end: copying a per-op tally at every new peak made summarize
    # quadratic when each op has its own name and every allocation is a new peak
    residency_changes: list[tuple[str, int]] = []
    compute_cost = remat_cost = 0.0
    peak, peak_clock, peak_event, changes_at_peak = -1, 0.0, None, 0
    decisions: list[Decision] = []
    waiting: list[Decision] = []  # budget evictions not yet matched to the allocation they served
    previous: dict[str, Any] | None = None  # the storage event before this one
    step_clocks: list[float] = []
    orphan_remats = 0
    start_clock = None
    remats = 0
    workspace_by_op: Counter = Counter()
    peak_workspace = 0
    addresses = Addresses()
    for event in events:
        kind = event["event"]
        if kind == "runtime":
            runtime = {k: v for k, v in event.items() if k != "event"}
            compute_cost += runtime.get("end_view_cost", 0.0)
            continue
        addresses.note(event)
        if start_clock is None:
            start_clock = event["clock"]
        compute_cost += event.get("view_cost", 0.0)
        if kind == "step":
            step_clocks.append(event["clock"])
            continue
        counts[kind] += 1
        sid, op, nbytes = event["id"], event["op"], event["nbytes"]
        storage_op[sid], storage_bytes[sid] = op, nbytes
        if kind in ("alloc", "remat"):
            was = resident.get(sid)
            if was is not None:
                residency_changes.append((was[0], -was[1]))
            resident[sid] = (op, nbytes)
            residency_changes.append((op, nbytes))
            for d in waiting:
                d.needed_by = op if kind == "alloc" else f"recomputing {op}"
            waiting = []
        else:
            was = resident.pop(sid, None)
            if was is not None:
                residency_changes.append((was[0], -was[1]))
        if kind == "alloc":
            # the outputs of one multi-output op come as consecutive events at one clock
            if not _same_op(event, previous):
                compute_cost += event.get("cost", 0.0)
        elif kind == "remat":
            remats_by_storage[sid] += 1
            if starts_replay(event, previous):
                remats += 1
                if str(event.get("trigger", "")).startswith(ORPHAN_TRIGGER):
                    orphan_remats += 1
                remats_by_op[op] += 1
                remat_cost_by_op[op] += event.get("cost", 0.0)
                remat_cost += event.get("cost", 0.0)
        elif kind == "evict":
            reason = event.get("reason", "budget")
            by_reason[reason] += 1
            if reason != "dead":
                evicted_by_op[op] += 1
                evicted_bytes[op] += nbytes
            if event.get("score") is not None:
                runner = event.get("runner_up")
                d = Decision(
                    event["clock"],
                    sid,
                    op,
                    nbytes,
                    event["score"],
                    runner[0] if runner else None,
                    runner[1] if runner else None,
                )
                decisions.append(d)
                waiting.append(d)
        previous = event
        workspace = event.get("workspace", 0)
        if workspace > workspace_by_op[op]:
            workspace_by_op[op] = workspace
        if event["memory"] + workspace > peak:
            peak, peak_clock, peak_event = event["memory"] + workspace, event["clock"], event
            peak_workspace = workspace
            changes_at_peak = len(residency_changes)
    peak_resident: Counter = Counter()
    for op, change in residency_changes[:changes_at_peak]:
        peak_resident[op] += change
    end_clock = events[-1]["clock"] if events and "clock" in events[-1] else 0.0
    return Summary(
        runtime,
        counts,
        by_reason,
        evicted_by_op,
        evicted_bytes,
        remats_by_op,
        remat_cost_by_op,
        remats_by_storage,
        storage_op,
        storage_bytes,
        compute_cost,
        remat_cost,
        max(peak, 0),
        peak_clock,
        peak_event,
        +peak_resident,
        decisions,
        end_clock,
        start_clock or 0.0,
        step_clocks,
        orphan_remats,
        remats,
        workspace_by_op,
        peak_workspace,
        addresses if runtime.get("fit") == "contiguous" or addresses.peak_address else None,
    )


def starts_replay(remat: dict[str, Any], previous: dict[str, Any] | None) -> bool:
    """Whether the ``remat`` event begins a rematerialization (a recipe replayed: one
    replay refills all its evicted outputs), ``previous`` being the storage event before
    it (None: the first). The events of one replay are consecutive and share its
    ``replay`` number; in a log from before that field, they share a clock."""
    if "replay" in remat:
        return previous is None or remat["replay"] != previous.get("replay")
    return not _same_op(remat, previous)


def _same_op(event: dict[str, Any], previous: dict[str, Any] | None) -> bool:
    """Whether ``event`` is another output of the op ``previous`` came from: the outputs
    of one op are consecutive events of one kind at one clock."""
    return (
        previous is not None
        and previous["event"] == event["event"]
        and previous["clock"] == event["clock"]
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole > 0 else "-"


NAME_COLUMN_MAX = 60


def _name_width(shown: list[tuple[str, Any]]) -> int:
    """The column of op names in a table by op: 22 characters, or the longest shown up to
    ``NAME_COLUMN_MAX`` (a name from a crafted log may be megabytes long: it overflows
    its column rather than pad every other row to its length)."""
    return min(max([22, *(len(printable(op)) for op, _ in shown)]), NAME_COLUMN_MAX)


def explain(summary: Summary, top: int = 5) -> str:
    """The summary as paragraphs of plain text; ``top`` (>= 1) items per list."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a whole number >= 1, got {top!r}")
    s = summary
    lines: list[str] = []
    budget = s.budget
    policy = ", ".join(printable(f"{k}={v}") for k, v in s.runtime.items() if k != "budget")
    lines.append("What happened")
    lines.append("-------------")
    lines.append(
        f"{sum(s.counts.values()):,} events: {s.counts['alloc']:,} allocations, "
        f"{s.counts['evict']:,} evictions, {_remats(s)}, "
        f"{s.counts['free']:,} frees, {s.counts['banish']:,} banishments."
    )
    if budget is not None:
        lines.append(
            f"Budget {human_bytes(budget)} ({budget:,} bytes)"
            + (f"; policy {policy}." if policy else ".")
        )
    elif s.runtime:
        lines.append(f"No budget (unbounded); policy {policy}.")
    else:
        lines.append("The log has no runtime header, so the budget is not known.")
    dead = s.evictions_by_reason.get("dead", 0)
    pressure = sum(n for r, n in s.evictions_by_reason.items() if r != "dead")
    lines.append(
        f"{dead:,} evictions freed tensors the program no longer referenced (eager "
        f"deallocation, nothing to recompute); {pressure:,} were forced by the budget "
        "and may have to be recomputed."
    )
    span = s.end_clock - s.start_clock
    n = len(s.step_clocks)
    steps = f" over {n:,} marked step{'s' if n != 1 else ''}" if n else ""
    lines.append(
        f"The clock (and every cost below) counts {clock_unit(s.runtime.get('cost'))}; "
        f"the log runs from clock {s.start_clock:,.0f} to {s.end_clock:,.0f} "
        f"(a span of {span:,.0f}){steps}."
    )

    lines.append("")
    lines.append("The peak")
    lines.append("--------")
    where = ""
    if s.peak_event is not None:
        e = s.peak_event
        where = (
            f", reached at clock {e['clock']:,.0f} when {e['event']} of #{e['id']} "
            f"({printable(e['op'])})"
        )
    lines.append(
        f"Peak resident memory {human_bytes(s.peak_memory)}"
        + (f" = {_share(s.peak_memory, budget)} of the budget" if budget else "")
        + where
        + "."
    )
    total = sum(s.peak_resident_by_op.values())
    if total:
        parts = [
            f"{printable(op)} {human_bytes(n)} ({_share(n, total)})"
            for op, n in s.peak_resident_by_op.most_common(top)
        ]
        rest = len(s.peak_resident_by_op) - len(parts)
        more = f", and {rest} more op{'s' if rest > 1 else ''}" if rest > 0 else ""
        lines.append(
            "Resident at the peak, by the op that made it: " + ", ".join(parts) + more + "."
        )
    if s.peak_workspace:
        lines.append(
            f"Besides, the kernel running there held {human_bytes(s.peak_workspace)} of "
            "workspace (scratch memory its op declares, counted under the budget while it runs)."
        )
    if s.peak_memory > total + s.peak_workspace:
        lines.append(
            f"The other {human_bytes(s.peak_memory - total - s.peak_workspace)} were allocated "
            "before the log began (parameters, data, optimizer state made outside the runtime)."
        )
    if s.workspace_by_op:
        parts = [
            f"{printable(op)} {human_bytes(n)}" for op, n in s.workspace_by_op.most_common(top)
        ]
        lines.append("The largest kernel workspaces, by op: " + ", ".join(parts) + ".")

    lines.append("")
    lines.append("Evictions forced by the budget")
    lines.append("------------------------------")
    if not s.budget_evictions_by_op:
        lines.append("None: everything fit.")
    else:
        shown = s.budget_evictions_by_op.most_common(top)
        width = _name_width(shown)
        for op, n in shown:
            lines.append(
                f"  {printable(op):<{width}} evicted {n:>6,} times, "
                f"{human_bytes(s.evicted_bytes_by_op[op])} in all"
            )
        lines.extend(_more_ops(s.budget_evictions_by_op, top))
    lines.extend(_decisions(s, top))
    if s.addresses is not None:
        lines.extend(_addresses(s.addresses, budget))

    lines.append("")
    lines.append("Rematerializations")
    lines.append("------------------")
    if not s.remats_by_op:
        lines.append("None: nothing evicted was needed again.")
    else:
        lines.append(
            f"{s.remats:,} recomputations cost {s.remat_cost:,.0f} on top of "
            f"{s.compute_cost:,.0f} of first computations: slowdown "
            f"{(s.compute_cost + s.remat_cost) / s.compute_cost:.3f}x."
            if s.compute_cost > 0
            else f"{s.remats:,} recomputations cost {s.remat_cost:,.0f}."
        )
        if s.orphan_remats:
            lines.append(
                f"{s.orphan_remats:,} of the recomputations rebuilt orphans ({ORPHAN_NOTE})."
            )
        lines.append("Costliest, by op:")
        shown = s.remat_cost_by_op.most_common(top)
        width = _name_width(shown)
        for op, cost in shown:
            n = s.remats_by_op[op]
            lines.append(
                f"  {printable(op):<{width}} {n:>6,} recomputations, cost {cost:>12,.0f} "
                f"({_share(cost, s.remat_cost)} of all recomputation)"
            )
        lines.extend(_more_ops(s.remat_cost_by_op, top))
        repeated = [(sid, n) for sid, n in s.remats_by_storage.most_common(top) if n > 1]
        if repeated:
            parts = [
                f"#{sid} ({printable(s.storage_op[sid])}, "
                f"{human_bytes(s.storage_bytes[sid])}) {n} times"
                for sid, n in repeated
            ]
            lines.append(
                "Recomputed more than once (evicted again before its last use): "
                + ", ".join(parts)
                + "."
            )
    return "\n".join(lines)


def _addresses(a: Addresses, budget: int | None) -> list[str]:
    """The section on the arena of a contiguous fit."""
    of_budget = f" = {_share(a.peak_address, budget)} of the budget" if budget else ""
    lines = [
        "",
        "Addresses (contiguous fit)",
        "--------------------------",
        f"The highest address in use was {human_bytes(a.peak_address)}{of_budget} (each "
        "value takes a block of its size rounded up to 512 bytes).",
    ]
    if not a.evictions:
        lines.append("No eviction was needed to free a block.")
        return lines
    frag = a.fragmentation
    lines.append(
        f"Evictions made to free a block large enough: {a.evictions:,}; {a.extra:,} of them "
        "while the bytes alone already fitted the budget (fragmentation forced those). "
        f"At these evictions the free memory was {sum(frag) / len(frag):.0%} fragmented on "
        f"average and {max(frag):.0%} at worst (1 - largest free block / free bytes)."
    )
    return lines


def _more_ops(by_op: Counter, top: int) -> list[str]:
    """The line that says how many ops a table of the ``top`` first leaves out."""
    rest = len(by_op) - top
    return [f"  and {rest} more op{'s' if rest > 1 else ''}"] if rest > 0 else []


def _remats(s: Summary) -> str:
    """The rematerialization count, with the storages refilled when an op with several
    outputs made them differ."""
    text = f"{s.remats:,} rematerializations"
    if s.counts["remat"] != s.remats:
        text += f" (recomputed ops; they refilled {s.counts['remat']:,} storages)"
    return text


def _decisions(s: Summary, top: int) -> list[str]:
    """How the heuristic chose: score statistics, close calls and a few examples."""
    decisions = s.decisions
    if not decisions:
        return []
    lines = [""]
    with_runner = [d for d in decisions if d.runner_up_id is not None]
    scored = [d for d in with_runner if d.runner_up_score is not None]
    ties = sum(1 for d in scored if d.runner_up_score == d.score)
    close = sum(1 for d in scored if d.runner_up_score != d.score and _ratio(d) < 1.1)
    unscored = len(with_runner) - len(scored)  # the log's null: an infinite or NaN score
    lines.append(
        f"The heuristic chose {len(decisions):,} victims, each the lowest score among the "
        f"candidates; {ties:,} were ties with the runner-up, {close:,} more were within 10% "
        "of it, "
        + (f"{unscored:,} had a runner-up with no finite score, " if unscored else "")
        + f"and {len(decisions) - len(with_runner):,} had no runner-up (the only candidate)."
    )
    needing = Counter(d.needed_by for d in decisions if d.needed_by)
    if needing:
        parts = [f"{printable(op)} ({n:,})" for op, n in needing.most_common(top)]
        rest = len(needing) - len(parts)
        more = f", and {rest} more op{'s' if rest > 1 else ''}" if rest > 0 else ""
        lines.append("Room was made for: " + ", ".join(parts) + more + ".")
    lines.append("First decisions:")
    for d in decisions[:top]:
        runner = (
            "no runner-up"
            if d.runner_up_id is None
            else f"runner-up #{d.runner_up_id} "
            f"({printable(s.storage_op.get(d.runner_up_id, '?'))}) "
            + (
                f"scored {d.runner_up_score:.3g}"
                if d.runner_up_score is not None
                else "with no finite score"  # (the log's null: infinite or NaN)
            )
        )
        lines.append(
            f"  clock {d.clock:>10,.0f}: evicted #{d.id} ({printable(d.op)}, "
            f"{human_bytes(d.nbytes)}) with score {d.score:.3g}; {runner}"
            + (f"; to make room for {printable(d.needed_by)}" if d.needed_by else "")
        )
    return lines


def _ratio(d: Decision) -> float:
    if d.score <= 0 or d.runner_up_score is None or math.isinf(d.runner_up_score):
        return math.inf
    return d.runner_up_score / d.score


def resident_timeline(events: list[dict[str, Any]]) -> dict[str, list]:
    """Columns for a memory plot: clock and memory after every event (and, before an
    event whose kernel had a workspace, memory with it), the clocks (with memory) of
    budget evictions and of rematerializations (one per replay, at its first event, as
    ``summarize`` counts them), and of step marks."""
    columns: dict[str, list] = defaultdict(list)
    previous = None  # the storage event before this one
    for event in events:
        kind = event["event"]
        if kind == "runtime":
            continue
        if kind == "step":
            columns["step_clock"].append(event["clock"])
            columns["step"].append(event["step"])
            continue
        if event.get("workspace"):  # the kernel's workspace, released when it ended
            columns["clock"].append(event["clock"])
            columns["memory"].append(event["memory"] + event["workspace"])
        columns["clock"].append(event["clock"])
        columns["memory"].append(event["memory"])
        if kind == "evict" and event.get("reason") != "dead":
            columns["evict_clock"].append(event["clock"])
            columns["evict_memory"].append(event["memory"])
        elif kind == "remat" and starts_replay(event, previous):
            columns["remat_clock"].append(event["clock"])
            columns["remat_memory"].append(event["memory"])
        previous = event
    return columns


def runtime_header(runtime: Any, **extra: Any) -> dict[str, Any]:
    """The ``runtime`` event that opens a log (``Runtime.header``)."""
    return runtime.header(**extra)


def write_event_log(path: str, runtime: Any, **extra: Any) -> None:
    """Write ``runtime``'s event log, its header first (``Runtime.export_events``)."""
    runtime.export_events(path, **extra)
