"""What the teaching pages say about the code is what the code does: the tutorial's
staleness of a fresh value is ``MIN_STALENESS``, its links to the code map resolve,
dtr.md names the reference policy's files (which exist), and the demo prints the score
its evictions used."""

from __future__ import annotations

import re
from pathlib import Path

from minidtr.runtime.heuristics import MIN_STALENESS, make_heuristic
from minidtr.testing import isolated_allocator

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
POLICY = ("heuristics.py", "victims.py", "estar.py", "eviction.py", "ledger.py", "remat.py")


def test_a_fresh_values_staleness_is_min_staleness_as_the_tutorial_says():
    page = (DOCS / "tutorial.md").read_text()
    assert "`MIN_STALENESS`, 1e-9" in page and float("1e-9") == MIN_STALENESS
    inside = re.search(r"<!-- output:inside -->\n```\n(.*?)```", page, re.S).group(1)
    made = r"^(\w): storage #\d+ made by \w+, \d+ bytes, cost (\d+)"
    costs = dict(re.findall(made, inside, re.M))
    c = re.search(r"^c: .*, (\d+) bytes, .*\(now (\d+)\), h_DTR score (\S+)$", inside, re.M)
    nbytes, score = int(c.group(1)), c.group(3)
    # c's last access is now; its e* is the matmul output it was computed from (cost of a)
    expected = (int(costs["c"]) + int(costs["a"])) / (nbytes * MIN_STALENESS)
    assert f"{expected:.3g}" == score
    prose = " ".join(page.split())
    assert f"({costs['c']} + {costs['a']}) / ({nbytes} · 1e-9) ≈ {score}" in prose


def test_the_tutorial_links_the_code_map_and_the_course():
    page = (DOCS / "tutorial.md").read_text()
    assert "[design.md](design.md#reading-the-policy)" in page
    assert "## Reading the policy" in (DOCS / "design.md").read_text()
    assert "(course/README.md)" in page and (DOCS / "course" / "README.md").is_file()


def test_dtr_md_points_at_the_reference_policys_files():
    page = (DOCS / "dtr.md").read_text()
    row = next(line for line in page.splitlines() if "the reference policy to read" in line)
    for name in (*POLICY, "lifetime.py"):
        assert name in row, name
        assert (ROOT / "minidtr" / "runtime" / name).is_file(), name
    assert "reference=True" in row


def test_the_demo_prints_the_score_it_evicts_by():
    from minidtr.cli_demo import demo_report

    with isolated_allocator():
        text = demo_report(steps=1, size="tiny", ratio=0.8)[1]
    formula = make_heuristic("dtr").formula
    assert f"Eviction score (dtr): {formula}, lowest evicted first" in text


def test_the_step5_skeleton_says_what_lock_one_does():
    skeleton = (DOCS / "course" / "step5_remat.py").read_text()
    said = re.search(r"``remat.lock_one\(storage, locked\)``:(.*?)\n- ", skeleton, re.S).group(1)
    assert "leaves ``last_access`` as it is" in said and "used now" not in said
    import minidtr as md

    with isolated_allocator() as allocator, md.Runtime(budget=10**6, reference=True):
        y = md.tanh(md.tensor([1.0, 2.0]))
        storage, locked = y.storage, []
        stamped = storage.last_access
        allocator.clock += 5
        allocator.remat.lock_one(storage, locked)
        assert (storage.locks, locked, storage.last_access) == (1, [storage], stamped)
        allocator.remat.unlock(locked)


def test_the_step6_skeleton_says_a_banish_that_fails_goes_on_as_eager():
    import ast

    from minidtr.course import grade_step6
    from minidtr.course.programs import budget_for, parse, run_program

    tree = ast.parse((DOCS / "course" / "step6_dealloc.py").read_text())
    policy = next(n for n in tree.body if getattr(n, "name", "") == "apply_policy")
    rule = re.search(r"\n6\. (.*?)\n7\. ", ast.get_docstring(policy), re.S).group(1)
    assert rule.startswith("Under eager, or a banish that could not banish"), rule
    # and so the reference does: x3's parent x2 cannot be banished, and x3 is rebuilt from it
    program = parse(grade_step6.SCENARIOS["an orphan"], 1.0)
    budget, _ = budget_for(program, dealloc="banish")
    events = run_program(program, budget, dealloc="banish").events
    assert [e["event"] for e in events if e.get("trigger") == "orphans of #2"] == ["remat"]
