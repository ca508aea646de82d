"""``minidtr explain EVENTS --html OUT``: one self-contained HTML page to explore an event log.

The page (no network: its script and style are inline) draws resident memory against
the budget on a canvas, one min-max bar per pixel column (up to the top of each
kernel's workspace), with step boundaries, and marks budget evictions and
rematerializations in two lanes under it. Clicking an eviction shows the candidates
the heuristic scored, with each term of the score (cost, the neighbourhood's cost,
size, staleness) and the runner-up; clicking a remat shows its cascade as a tree:
the access that triggered it, what was rebuilt, and for which input.

Python does the joins once (which allocation each eviction made room for, which
replay each remat belongs to and which replay it fed), so the page only indexes
flat columns: a 20,000-event log draws in milliseconds.
"""

from __future__ import annotations

import json
from typing import Any

from .event_log import CANDIDATE_OPTIONAL, CANDIDATE_REQUIRED, check_events
from .explain import clock_unit, explain, summarize
from .explorer_page import PAGE
from .reading import printable
from .runtime.arena import aligned

KINDS = ("alloc", "evict", "remat", "free", "banish")
BUDGET_EVICTION, DEAD_EVICTION = "evict", "dead"
HEADER_FIELDS = ("budget", "heuristic", "score", "dealloc", "cost")  # what the page reads


def page_data(events: list[dict[str, Any]], title: str = "") -> dict[str, Any]:
    """The page's data: flat columns per event plus details for evictions and remats.
    ``events`` are checked first (``check_events``): the page takes numbers where it
    expects numbers, and shows every string as text."""
    check_events(events)
    summary = summarize(events)
    header = {k: v for k, v in summary.runtime.items() if k in HEADER_FIELDS}
    start = summary.start_clock
    ops: dict[str, int] = {}
    columns: dict[str, list] = {k: [] for k in ("kind", "t", "mem", "ws", "id", "op", "nbytes")}
    evictions: dict[int, dict[str, Any]] = {}
    remats: dict[int, dict[str, Any]] = {}
    steps: list[list[float]] = []
    waiting: list[int] = []
    addresses: list[Any] = []  # each column row's address, as the log gives it
    for event in events:
        kind = event["event"]
        if kind == "runtime":
            continue
        if kind == "step":
            steps.append([event["step"], event["clock"] - start])
            continue
        index = len(columns["kind"])
        code = kind
        if kind == "evict" and event.get("reason") == "dead":
            code = DEAD_EVICTION
        columns["kind"].append(code)
        columns["t"].append(event["clock"] - start)
        columns["mem"].append(event["memory"])
        columns["ws"].append(event.get("workspace", 0))  # memory + ws while the kernel ran
        columns["id"].append(event["id"])
        columns["op"].append(ops.setdefault(event["op"], len(ops)))
        columns["nbytes"].append(event["nbytes"])
        addresses.append(event.get("address"))
        if kind in ("alloc", "remat"):
            # the row each waiting eviction made room for, not its op's name: a copy of a
            # long name per eviction made the page hundreds of times the size of the log
            for i in waiting:
                evictions[i]["for"] = index
            waiting = []
        if kind == "evict" and code != DEAD_EVICTION:
            detail = {"reason": event.get("reason", "budget")}
            for key in ("score", "runner_up", "free_bytes", "largest_free", "extra"):
                if key in event:
                    detail[key] = event[key]
            if "candidates" in event:
                detail["candidates"] = [known_fields(c) for c in event["candidates"]]
            evictions[index] = detail
            waiting.append(index)
        elif kind == "remat":
            remats[index] = {
                key: event[key] for key in ("cost", "cascade", "trigger", "parent") if key in event
            }
    return {
        "title": title,
        "header": header,
        "start": start,
        "unit": clock_unit(header.get("cost")),
        "summary": explain(summary, top=5),
        "ops": list(ops),
        "columns": columns,
        "steps": steps,
        "evictions": evictions,
        "remats": remats,
        "replays": summary.remats,  # rematerializations: a replay refills several remats
        "cascades": cascades(columns, remats),
        "blocks": address_blocks(columns, addresses, header.get("budget")),
    }


def known_fields(candidate: dict[str, Any]) -> dict[str, Any]:
    """The fields of an eviction candidate that the page shows. A log may carry others,
    unchecked (a NaN stopped the page being written, a deeply nested one overflowed the
    stack), and the page has no use for them."""
    known = CANDIDATE_REQUIRED.keys() | CANDIDATE_OPTIONAL.keys()
    return {key: value for key, value in candidate.items() if key in known}


def address_blocks(
    columns: dict[str, list], addresses: list[Any], budget: Any
) -> dict[str, Any] | None:
    """The address lane's blocks (None when the log has no addresses: a byte-fit log).
    A block runs from the alloc or remat that placed a value (``start``: its row) to the
    eviction, free or banishment that took it out (``end``: its row, -1 if it is still
    resident when the log ends) and holds the value's bytes rounded up to the arena's
    alignment from ``address`` on. A value that leaves with an address but entered before
    the log began gets a block from the start (``start`` -1). ``check_events`` has made
    sure that every address is a whole number or null."""
    blocks: dict[str, list[int]] = {"start": [], "end": [], "address": [], "size": []}
    open_blocks: dict[int, int] = {}  # storage id -> its block, while resident
    rows = zip(columns["kind"], columns["id"], addresses, strict=True)
    for row, (kind, sid, address) in enumerate(rows):
        entering = kind in ("alloc", "remat")
        if sid in open_blocks:
            blocks["end"][open_blocks.pop(sid)] = row
            if not entering:
                continue
        if address is None:
            continue
        if entering:
            open_blocks[sid] = len(blocks["start"])
        blocks["start"].append(row if entering else -1)
        blocks["end"].append(-1 if entering else row)
        blocks["address"].append(address)
        blocks["size"].append(aligned(columns["nbytes"][row]))
    if not blocks["start"]:
        return None
    ends = [a + s for a, s in zip(blocks["address"], blocks["size"], strict=True)]
    top = max(budget or 0, *ends)
    return {**blocks, "top": top}


def cascades(columns: dict[str, list], remats: dict[int, dict[str, Any]]) -> dict[int, Any]:
    """Each cascade as a forest of replays. A replay (node) is a run of remat events of
    one cascade at one clock with one parent (a multi-output op refills its siblings
    together); its parent node is the next replay of the cascade that rebuilt the
    storage it was rebuilt for (a replay runs after the inputs it needs)."""
    out: dict[int, dict[str, Any]] = {}
    last_key = None
    for index, remat in remats.items():
        number = remat.get("cascade")
        if number is None:
            continue
        cascade = out.setdefault(
            number, {"trigger": remat.get("trigger", "?"), "nodes": [], "first": index}
        )
        cascade["last"] = index
        key = (number, columns["t"][index], remat.get("parent"))
        if key == last_key and cascade["nodes"]:
            cascade["nodes"][-1]["events"].append(index)
        else:
            cascade["nodes"].append(
                {"events": [index], "parent": remat.get("parent"), "cost": remat.get("cost", 0)}
            )
        last_key = key
    # budget evictions before each row: a cascade's count is a difference of two, not a
    # walk over its rows (interleaved cascades span most of the log each: quadratic)
    evictions_before = [0]
    for kind in columns["kind"]:
        evictions_before.append(evictions_before[-1] + (kind == BUDGET_EVICTION))
    for cascade in out.values():
        nodes = cascade["nodes"]
        latest: dict[int, int] = {}  # storage id -> the nearest later node that rebuilt it
        for n in range(len(nodes) - 1, -1, -1):
            node = nodes[n]
            node["up"] = latest.get(node["parent"]) if node["parent"] is not None else None
            for index in node["events"]:
                latest[columns["id"][index]] = n
        cascade["evictions"] = (
            evictions_before[cascade["last"] + 1] - evictions_before[cascade["first"]]
        )
    return out


def write_html(events: list[dict[str, Any]], path: str, title: str = "") -> int:
    """Write the explorer page for ``events``; returns its size in bytes."""
    data = page_data(events, title)
    summary = data.pop("summary")  # explain's own lines, its names made printable already
    data = json.dumps({**shown(data), "summary": summary}, separators=(",", ":"), allow_nan=False)
    # the data first: a title holding "/*DATA*/" (a file's name) stays a title
    html = PAGE.replace("/*DATA*/", _script_safe(data), 1)
    html = html.replace("<!--TITLE-->", _escape(printable(title or "minidtr event log")))
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return len(html.encode())


def shown(value: Any) -> Any:
    """``value`` with every string in it (keys too) ``printable``: a name from a log is
    shown, never obeyed, on the page as in the terminal (a right-to-left override in an
    op's name turned the page's own text around it backwards)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {shown(k) if isinstance(k, str) else k: shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    return value


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _script_safe(data: str) -> str:
    """JSON that cannot end or change the ``<script>`` element holding it: no ``<`` at all
    (so neither ``</script>`` nor ``<!--``, which would put the parser in a state where a
    later ``<script>`` swallows the page's own), and no ``&`` or ``>`` either. JSON
    reads ``\\u003c`` as ``<``, so the data is unchanged."""
    return data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
