"""Traces, the replay simulator and the optimal baselines (see docs/simulator.md).

``load_log``/``write_log`` read and write the DTR prototype's JSON-lines logs;
``record`` writes a live minidtr run in the same format; ``simulate`` replays a
trace under a budget with the live runtime's own allocator and heuristics;
``sweep`` runs many budgets and heuristics in parallel; ``bundled_traces()``
lists the traces that ship with the package (one training step of each model);
``lower_bound`` proves a lower bound on every schedule's slowdown (a linear
relaxation, ``minidtr.sim.bound``). The baselines (an optimal schedule by
mixed-integer programming, Chen's sqrt(N) and Griewank's revolve for chains) live in
``minidtr.sim.checkmate`` and ``minidtr.sim.chain``.
"""

from .bound import LowerBound, lower_bound
from .bundled import bundled_traces
from .floors import Floor, floor
from .record import Recorder, record
from .simulator import Baseline, Replayer, SimResult, baseline, simulate
from .sweep import sweep
from .trace import Trace, TraceError, load_log, make_trace, write_log

__all__ = [
    "Baseline",
    "baseline",
    "Floor",
    "Recorder",
    "Replayer",
    "SimResult",
    "Trace",
    "TraceError",
    "bundled_traces",
    "load_log",
    "floor",
    "LowerBound",
    "lower_bound",
    "make_trace",
    "record",
    "simulate",
    "sweep",
    "write_log",
]
