"""What ``minidtr train`` shows: the progress line while it runs, the summary table of a
run, the table of ``--find-budget``'s probes, and the model's floor in words."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .explain import ORPHAN_NOTE, clock_unit, human_bytes
from .training import MEASURE_STEPS

SUMMARY_WIDTH = 22  # the label column of the summary table


class Progress:
    """The progress line on a terminal: a tqdm bar over the steps whose postfix shows the
    loss and, once anything was recomputed or searched for, the slowdown (cost model, and
    wall time when eviction work shows there), the remats and the search time. While a
    step runs it is refreshed every second, so a run that grinds shows it as it goes.
    Nothing is shown without tqdm or off a terminal (the summary is printed either way)."""

    REFRESH_SECONDS = 1.0

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.bar = None
        self.loss: float | None = None

    def steps(self, steps: Iterable[int]) -> Iterable[int]:
        if not self.enabled:
            return steps
        try:
            from tqdm import tqdm
        except ImportError:
            return steps
        self.bar = tqdm(
            steps, total=self.total, unit="step", leave=False, disable=None, dynamic_ncols=True
        )
        return self.bar

    def on_loss(self, bar: Any, loss: float) -> None:
        self.loss = loss

    @contextmanager
    def watch(self, runtime: Any) -> Iterator[None]:
        """Refresh the postfix from ``runtime``'s statistics every second (a daemon
        thread: it only reads counters)."""
        if self.bar is None or getattr(self.bar, "disable", True):
            yield
            return
        stop = threading.Event()

        def refresh() -> None:
            while not stop.wait(self.REFRESH_SECONDS):
                self.show(runtime)

        thread = threading.Thread(target=refresh, name="minidtr-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def show(self, runtime: Any) -> None:
        self.bar.set_postfix_str(progress_text(runtime, self.loss), refresh=True)

    def close(self) -> None:
        """Clear the bar (before printing what an interrupted run did)."""
        if self.bar is not None:
            self.bar.close()


def progress_text(runtime: Any, loss: float | None) -> str:
    """``loss 0.4131 | slowdown 1.52x (wall 2.1x), 490 remats, search 3.1 s``."""
    parts = [] if loss is None else [f"loss {loss:.4f}"]
    s = runtime.stats_
    if s.remats or s.searches:
        wall = runtime.wall_slowdown()
        wall_text = f" (wall {wall:.1f}x)" if wall >= 1.5 else ""
        parts.append(
            f"slowdown {s.slowdown:.2f}x{wall_text}, {s.remats:,} remats, "
            f"search {s.search_time:.1f} s"
        )
    return " | ".join(parts)


def floor_text(floors: Any) -> str:
    """The model's floor, ``1.7 MiB = 0.168 x unbounded peak 9.9 MiB (constants ...)``."""
    return (
        f"{human_bytes(floors.floor)} = {floors.floor_ratio:.3f} x unbounded peak "
        f"{human_bytes(floors.peak)} (constants {floors.constant_ratio:.3f}, "
        f"largest op {floors.floor_op})"
    )


def floor_verdict(budget: int, floors: Any, dealloc: str = "eager") -> str:
    """What a failed budget means against the model's floor (measured under eager
    deallocation: a floor for ``ignore`` too, not for ``banish``)."""
    steps = getattr(floors, "measured_steps", 0)
    measured = f", over its first {steps} steps" if steps > 1 else ""  # (a shorter run may fit)
    where = (
        f"the model's floor of {human_bytes(floors.floor)} "
        f"({floors.floor_ratio:.3f} of peak{measured})"
    )
    if budget < floors.floor and dealloc == "banish":
        return f"this budget is below {where} under eager deallocation; banish may fit lower"
    if budget < floors.floor:  # (the error's "at least" is this op's need alone)
        return (
            f"this budget is below {where}: no policy can fit it; give it "
            f"{floors.floor:,} bytes or more"
        )
    return (
        f"this budget is above {where}: the heuristic ran out of evictable memory; "
        "a larger budget (or another heuristic) may fit"
    )


def thrash_verdict(error: Any, floors: Any, dealloc: str) -> str:
    """What a ``ThrashError`` raised by ``train`` means, and what to change. Below the
    model's floor (under eager or ignore deallocation) a higher limit would only trade
    the thrashing for a ``BudgetError``: the floor's verdict replaces the error's advice."""
    below_floor = error.budget is not None and error.budget < floors.floor
    if not below_floor or dealloc == "banish":
        return f"{error} In this command: --budget/--ratio, --max-slowdown, --max-wall-slowdown."
    return f"{error.finding}; {floor_verdict(error.budget, floors, dealloc)}."


def budget_verdict(error: Any, floors: Any, dealloc: str) -> str:
    """What a ``BudgetError`` raised by ``train`` means. A step after the measured ones
    that needs more than their floor met a batch the measurement did not see (a
    Tree-LSTM's trees differ from batch to batch): then say what that step needs, as a
    ratio of the measured peak too; otherwise ``floor_verdict``."""
    steps_done = len(error.result.losses) if getattr(error, "result", None) else 0
    needs, measured = error.memory + error.needed, floors.measured_steps
    if not measured or steps_done < measured or needs <= floors.floor:
        return floor_verdict(error.budget, floors, dealloc)
    return (
        f"step {steps_done:,}, counting from 0 as the event log and the plot do, needs more "
        f"than the first {measured} steps, on which "
        f"the floor ({human_bytes(floors.floor)}) and the peak ({human_bytes(floors.peak)}) "
        f"were measured: at least {needs:,} bytes, {needs / floors.peak:.3f} of that peak; "
        "its batch is larger than theirs: measure more steps (--measure-steps) or raise "
        "the budget"
    )


def frontier_table(search: Any) -> str:
    """The probes of ``--find-budget`` (a ``BudgetSearch``) and the lowest ratio found."""
    c, u = search.config, search.unbounded
    rows = [
        f"minidtr train {c.model} --size {c.size} --find-budget --max-slowdown "
        f"{_slowdown_option(search.max_slowdown)} ({_steps(c.steps)} per probe, heuristic "
        f"{c.heuristic}, cost {c.cost})",
        f"floor: {floor_text(u)}",
        "",
        f"{'ratio':>6}{'budget':>12}  {'status':<12}{'slowdown':>9}{'remats':>8}{'s/step':>8}",
    ]
    for p in search.probes:
        ran = p.status == "ok"
        rows.append(
            (
                f"{p.ratio:>6.2f}{human_bytes(p.budget):>12}  {p.status:<12}"
                + (f"{p.slowdown:>8.3f}x{p.remats:>8,}{p.seconds_per_step:>8.2f}" if ran else "")
            ).rstrip()
        )
    rows.append("")
    rows.append(_frontier_verdict(search))
    return "\n".join(rows)


def _slowdown_option(limit: float | None) -> str:
    """A slowdown limit as ``--max-slowdown`` takes it: ``2``, or ``none`` for no limit."""
    return "none" if limit is None else f"{limit:g}"


def _frontier_verdict(search: Any) -> str:
    """The last line: the lowest ratio found (so far, when the search was interrupted)."""
    best = search.lowest
    limit = (
        "with no slowdown limit"
        if search.max_slowdown is None
        else f"within {search.max_slowdown:g}x"
    )
    if search.interrupted:
        done = f"interrupted (Ctrl-C) after {len(search.probes)} probes, before the search ended"
        if best is None:
            return f"{done}: no probe so far trains {limit}"
        done += f"; so far the lowest ratio {limit}"
    elif best is None:
        return f"no probed ratio trains {limit}"
    else:
        done = f"lowest ratio {limit}"
    return (
        f"{done}: {best.ratio:.2f} ({human_bytes(best.budget)}, {best.slowdown:.3f}x), "
        f"{best.budget / search.unbounded.floor:.2f} x the floor"
    )


def summary_table(result: Any) -> str:
    """The summary ``minidtr train`` prints of a ``TrainResult``: the command, the budget
    and floor, loss and accuracy, then time, memory, evictions, remats and slowdown."""
    return "\n".join(
        [
            *_summary_head(result),
            "",
            *_summary_learning(result),
            "",
            *_summary_costs(result),
            "",
            *_summary_notes(result),
        ]
    )


def _summary_head(result: Any) -> list[str]:
    c, task = result.config, result.task
    measured = f" --measure-steps {c.measure_steps}" if c.measure_steps != MEASURE_STEPS else ""
    rows = [
        f"minidtr train {c.model} --size {c.size} --steps {c.steps} --batch "
        f"{task.batch_size} --seed {c.seed}{measured} "
        f"({task.model.num_parameters():,} parameters)"
    ]
    if result.interrupted or result.stopped_by:
        rows.extend(_stop_rows(result))
    policy = f"(heuristic {c.heuristic}, dealloc {c.dealloc}, cost {c.cost})"
    if result.budget is None:
        rows.append(f"budget: none {policy}")
    else:
        ratio = (
            f" = {result.budget / result.unbounded_peak:.2f} x unbounded peak "
            f"{human_bytes(result.unbounded_peak)}"
            if result.unbounded_peak
            else ""
        )
        rows.append(f"budget: {human_bytes(result.budget)}{ratio} {policy}")
    if result.floors is not None:
        rows.append(f"floor: {floor_text(result.floors)}")
    return rows


def _stop_rows(result: Any) -> list[str]:
    """What the summary of a run cut short covers: the loss, the steps that finished;
    the rest, the run up to the stop, so the part of the next step done before it."""
    done, interrupted = len(result.losses), result.interrupted
    how = "interrupted (Ctrl-C)" if interrupted else f"stopped by a {result.stopped_by}"
    return [
        f"{how} after {done} of {result.config.steps} steps"
        f"{'' if interrupted else ' (the message below)'}: the loss is of those steps; the",
        f"time, memory, evictions and remats run to the {'interrupt' if interrupted else 'error'}"
        f", so include the part of step {done} (counting from 0) done before it",
    ]


def _steps(n: int) -> str:
    return f"{n:,} step{'s' if n != 1 else ''}"


def _summary_learning(result: Any) -> list[str]:
    w = SUMMARY_WIDTH
    if not result.losses:
        return [f"{'loss':<{w}}no step finished"]
    tail = min(10, len(result.losses))
    end_loss = sum(result.losses[-tail:]) / tail
    unmeasured = ""
    if result.interrupted or result.stopped_by:
        how = "was interrupted" if result.interrupted else "stopped"
        unmeasured = f"   (end: not measured, the run {how})"
    return [
        f"{'':<{w}}{'start':>12}{'end':>12}",
        f"{'loss':<{w}}{result.losses[0]:>12.4f}{end_loss:>12.4f}"
        f"   (end: {f'mean of the last {tail} steps' if tail > 1 else 'the only step'})",
        f"{'test ' + result.task.metric:<{w}}{_percent(result.accuracy_start)}"
        f"{_percent(result.accuracy_end)}{unmeasured}",
    ]


def _percent(fraction: float) -> str:
    return f"{'-':>12}" if math.isnan(fraction) else f"{fraction:>12.1%}"


def _summary_costs(result: Any) -> list[str]:
    s, w = result.stats, SUMMARY_WIDTH
    peak = s["peak_memory"]
    of_budget = f" ({peak / result.budget:.0%} of the budget)" if result.budget else ""
    if s.get("real_peak") is not None:  # measured (--measure-real): the two side by side
        real = s["real_peak"]
        of_budget = (
            f"{of_budget} counted, {human_bytes(real)}"
            + (f" ({real / result.budget:.0%})" if result.budget else "")
            + f" real; {human_bytes(s['traced_peak'])} with the Python objects made meanwhile"
        )
    forced = s["evictions"] - s["dead_evictions"]
    remats = f"{'remats':<{w}}{s['remats']:,}"
    if s.get("orphan_remats"):
        remats += f"  ({s['orphan_remats']:,} of them rebuilt orphans, see below)"
    return [
        f"{'steps/s':<{w}}{result.steps_per_second:.2f}"
        f"  ({result.seconds:.1f} s for {_steps(len(result.losses))})",
        f"{'peak memory':<{w}}{human_bytes(peak)}{of_budget}",
        *_summary_addresses(s, result.budget),
        f"{'evictions':<{w}}{s['evictions']:,}  ({forced:,} forced by the budget, "
        f"{s['dead_evictions']:,} of dead tensors)",
        remats,
        f"{'slowdown':<{w}}{s['slowdown']:.3f}x  ((compute {s['compute_cost']:.3g} + "
        f"remat {s['remat_cost']:.3g}) / compute, in clock units, see below)",
        f"{'eviction search':<{w}}{s['search_time']:.2f} s over {s['searches']:,} searches",
    ]


def _summary_addresses(s: dict, budget: int | None) -> list[str]:
    """Under ``--fit contiguous``: the peak address, the placement failures with their
    mean fragmentation, and the evictions the contiguous rule added."""
    if s.get("fit") != "contiguous":
        return []
    w, peak = SUMMARY_WIDTH, s["peak_address"]
    of_budget = f" ({peak / budget:.0%} of the budget)" if budget else ""
    return [
        f"{'peak address':<{w}}{human_bytes(peak)}{of_budget}, {s['placement']} placement",
        f"{'placement':<{w}}{s['placement_failures']:,} requests found no free block at "
        f"first (mean fragmentation {s['fragmentation']:.2f}); {s['extra_evictions']:,} "
        "evictions made while the bytes alone fitted",
    ]


def _summary_notes(result: Any) -> list[str]:
    rows = [f"The clock counts {clock_unit(result.config.cost)}."]
    if result.stats.get("orphan_remats"):
        rows.append(f"Orphans: {ORPHAN_NOTE}.")
    return rows
