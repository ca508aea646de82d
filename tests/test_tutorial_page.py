"""docs/tutorial.md shows what docs/tutorial_example.py prints (its output blocks are
filled by docs/refresh_tutorial.py), and the ids and numbers its prose quotes are those
of the runs it describes, regenerated here: the example's, the same step at 70% of its
peak, and the ResNet run whose explorer page section 8 reads."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def run_python(*args: str, cwd: pathlib.Path | None = None) -> str:
    return subprocess.run(
        [sys.executable, *args], check=True, capture_output=True, text=True, timeout=120, cwd=cwd
    ).stdout


@pytest.fixture(scope="module")
def printed() -> str:
    return run_python(str(DOCS / "tutorial_example.py"))


def prose() -> str:
    """The tutorial with its line breaks and runs of spaces as one space."""
    return " ".join((DOCS / "tutorial.md").read_text().split())


def assert_quoted(page: str, *phrases: str) -> None:
    stale = [phrase for phrase in phrases if phrase not in page]
    assert not stale, f"docs/tutorial.md no longer says what its run gives: {stale}"


def test_every_output_block_of_the_tutorial_is_what_the_example_prints(printed):
    spec = importlib.util.spec_from_file_location("refresh_tutorial", DOCS / "refresh_tutorial.py")
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    page = (DOCS / "tutorial.md").read_text()
    for name, body in refresh.sections(printed).items():
        shown = re.search(rf"<!-- output:{name} -->\n```\n(.*?)\n```\n<!-- /output -->", page, re.S)
        assert shown is not None, f"tutorial.md has no output block {name!r}"
        assert shown.group(1) == body, (
            f"tutorial.md's {name!r} block is stale: run python docs/refresh_tutorial.py, "
            "then reread the prose around it"
        )


def test_the_prose_quotes_the_examples_scores_victims_and_cascade(printed):
    """Sections 2, 4 and 6 read the example's output: a's score, the ops the first
    evictions made room for, and the ids of the first cascade (which id was rebuilt and
    which was evicted after which)."""
    page, lines = prose(), printed.splitlines()

    def scored(name: str) -> tuple[int, int, int, str]:
        """The bytes, cost, staleness and printed score of value ``name``."""
        found = re.search(
            rf"^{name}: storage #\d+ made by \w+, (\d+) bytes, cost (\d+), last access at "
            r"clock (\d+) \(now (\d+)\), h_DTR score (\S+)$",
            printed,
            re.M,
        )
        nbytes, cost, last, now, score = found.groups()
        return int(nbytes), int(cost), int(now) - int(last), score

    nbytes, cost, stale, score = scored("a")
    assert_quoted(page, f"cost {cost:,}", f"{cost} / ({nbytes} · {stale}) ≈ {float(score):.2g}")
    # b's score is its own cost and the evicted matmul's (a's cost, the same shapes)
    # over its size and staleness; without the matmul it would be below a's
    b_bytes, b_cost, b_stale, b_score = scored("b")
    alone = b_cost / (b_bytes * b_stale)
    assert alone < float(score) < float(b_score)
    assert float(b_score) == pytest.approx((b_cost + cost) / (b_bytes * b_stale), rel=1e-2)
    assert_quoted(
        page,
        f"{b_cost} / ({b_bytes} · {b_stale}) ≈ {alone:.2g}",
        f"({b_cost} + {cost}) / ({b_bytes} · {b_stale}) ≈ {float(b_score):.2g}",
    )

    evicted_for = r"^ +clock +[\d,]+: evicted #\d+ \((\w+),.* to make room for (\w+)$"
    room = re.findall(evicted_for, printed, re.M)
    victims, needed = {op for op, _ in room}, [op for _, op in room]
    assert victims == {"tanh"} and len(needed) == 2
    assert_quoted(page, "Both victims are `tanh` outputs", f"(`{needed[0]}`, then `{needed[1]}`)")

    def remats_and_slowdown(line: str) -> tuple[int, float]:
        found = re.search(r"remats (\d+), slowdown ([\d.]+)", line)
        return int(found.group(1)), float(found.group(2))

    budget = next(line for line in lines if line.startswith("budget ") and "loss" in line)
    cascade_line = next(line for line in lines if line.startswith("budget ") and "loss" not in line)
    (remats85, slow85), (remats80, slow80) = map(remats_and_slowdown, (budget, cascade_line))
    assert_quoted(
        page,
        f"more than twice the remats ({remats85} → {remats80})",
        f"for {100 * (slow80 - 1):.1f}% more compute where the 85% budget cost "
        f"{100 * (slow85 - 1):.1f}%",
    )

    start = lines.index("around the first remat:")
    events = [line.split() for line in lines[start + 1 :] if line.startswith("  ")]
    first = next(i for i, e in enumerate(events) if e[0] == "remat")
    made = next(e for e in reversed(events[:first]) if e[0] == "alloc")
    remats = [e for e in events[first:] if e[0] == "remat"]
    budget_evictions = [
        (i, e) for i, e in enumerate(events) if e[0] == "evict" and e[3:] == ["budget"]
    ]
    (at, evicted), (_, second), (_, third) = budget_evictions[:3]
    rebuilt_before = next(e for e in reversed(events[:at]) if e[0] == "remat")
    most = re.search(r"^most recomputed: #\d+ \w+ x(\d+)", printed, re.M)
    assert int(most.group(1)) == 2  # "Some storages are recomputed twice"
    assert_quoted(
        page,
        f"backward has just made a `{made[2]}` ({made[1]})",
        "the chain is rebuilt in order ("
        + ", ".join(f"`{op}` {sid}" for _, sid, op, *_ in remats[:3])
        + ", ...)",
        f"{evicted[1]} is evicted as soon as {rebuilt_before[1]} is rebuilt from it, "
        f"{second[1]} and {third[1]} as soon as the next ones are",
    )


ORPHAN_RUNS = """
import contextlib, io, json, runpy
import minidtr as md
with contextlib.redirect_stdout(io.StringIO()):
    example = runpy.run_path({path!r})
peak = example["free"].stats()["peak_memory"]
runs = {{}}
for ratio in (0.8, 0.7):
    for orphans in (True, False):
        for w in example["weights"]:
            w.grad = None
        runtime = md.Runtime(budget=int(ratio * peak), cost="flops", rebuild_orphans=orphans)
        with runtime:
            example["step"]()
        runs[f"{{ratio}} {{orphans}}"] = [runtime.stats()["remats"], runtime.stats()["slowdown"]]
print(json.dumps(runs))
"""


def test_the_orphan_rebuild_numbers_are_the_examples_step_at_70_percent():
    runs = json.loads(run_python("-c", ORPHAN_RUNS.format(path=str(DOCS / "tutorial_example.py"))))
    (with80, _), (without80, _) = runs["0.8 True"], runs["0.8 False"]
    (with70, slow_with), (without70, slow_without) = runs["0.7 True"], runs["0.7 False"]
    assert with80 == without80
    assert_quoted(
        prose(),
        f"At 70% of the peak the same step takes {with70} remats (a {slow_with:.2f}× "
        f"slowdown) with it, and {without70} ({slow_without:.2f}×) with `md.Runtime(..., "
        f"rebuild_orphans=False)`",
        f"(at 80% the two make the same {with80})",
    )


def deepest_cascade(data: dict) -> tuple[dict, list[int]]:
    """The cascade docs/make_screenshots.py draws (the first, in log order, whose tree of
    at most 12 items is the deepest) and its chain of replays from the top down to its
    deepest one, as the page's tree nests them (each node's ``up``: the replay it was for)."""
    best, chain = None, []
    for cascade in sorted(data["cascades"].values(), key=lambda c: c["first"]):
        nodes = cascade["nodes"]
        if 1 + len(nodes) > 12:  # the trigger's item and one per replay
            continue
        for k in range(len(nodes)):
            path = [k]
            while nodes[path[-1]]["up"] is not None:
                path.append(nodes[path[-1]]["up"])
            if len(path) > len(chain):
                best, chain = cascade, path[::-1]
    return best, chain


def test_the_explorer_section_quotes_its_resnet_run(tmp_path):
    """Section 8 reads the screenshots of the page of `minidtr train resnet --ratio 0.3
    --steps 3` (docs/make_screenshots.py): the eviction it clicks (a third of the way
    through) and the deepest cascade, by their ids and ratios."""
    from minidtr.explain import load_events
    from minidtr.explorer import page_data

    train = ["train", "resnet", "--ratio", "0.3", "--steps", "3", "--no-progress"]
    run_python("-m", "minidtr", *train, "--events", "ev.jsonl", cwd=tmp_path)
    data = page_data(load_events(str(tmp_path / "ev.jsonl")))
    columns, page = data["columns"], prose()

    rows = sorted(data["evictions"])
    eviction = data["evictions"][rows[len(rows) // 3]]
    victim, *others = eviction["candidates"]
    runner_up = next(c for c in others if c["id"] == eviction["runner_up"][0])
    assert len(others) == 4 and {c["neighbourhood"] for c in [victim, *others]} == {0}
    assert len({c["nbytes"] for c in [victim, *others]}) == 1
    assert victim["op"] == "conv2d" and runner_up["op"].startswith("batch_norm")
    assert victim["cost"] < runner_up["cost"]  # "a little cheaper to recompute"
    assert_quoted(
        page,
        "none of the five has an evicted neighbourhood",
        f"last used {victim['staleness'] / runner_up['staleness']:.1f} times as long ago",
        f"The runner-up scored {runner_up['score'] / victim['score']:.2f} times the victim's score",
    )

    cascade, chain = deepest_cascade(data)
    nodes = cascade["nodes"]

    def op(k: int) -> str:
        return data["ops"][columns["op"][nodes[k]["events"][0]]]

    def rebuilt(k: int) -> str:
        return f"#{columns['id'][nodes[k]['events'][-1]]}"

    top, second, third = chain[:3]
    assert_quoted(
        page,
        f"`{cascade['trigger']}` needed {rebuilt(top)}, whose `{op(top)}` needed "
        f"{rebuilt(second)}, whose `{op(second)}` needed {rebuilt(third)}... "
        f"{WORDS[len(chain)]} replays deep",
    )


def test_the_classic_picture_quotes_its_three_runs(tmp_path):
    """Section 9 reads the three chain runs of ``python -m minidtr.course chain``."""
    printed = run_python("-m", "minidtr.course", "chain", str(tmp_path))
    runs = re.findall(r"\(peak ([\d,]+) bytes, (\d+) remats,", printed)
    (plain, _), (checkpointed, by_hand), (dtr, dynamic) = [
        (int(peak.replace(",", "")), int(remats)) for peak, remats in runs
    ]
    assert round(plain / checkpointed) == 2 and dtr <= checkpointed
    assert_quoted(
        prose(),
        f"The checkpoints halve the peak for {by_hand} recomputed activations; DTR, given the "
        f"same memory, recomputes {dynamic}.",
    )
