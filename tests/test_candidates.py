"""The candidate table (minidtr/runtime/fast/table.py) and the table-based eviction decision
(fast/search.py): the table behaves as the ordered set it accelerates, its columns follow
the storages, and every decision equals the reference loop's (same victim, score,
runner-up, shortlist, float for float) for every heuristic, with and without sampling,
min_size and events."""

import random

import numpy as np
import pytest
from decision_check import checked_decisions

import minidtr as md
from minidtr.runtime.candidates import Candidates
from minidtr.runtime.fast.borders import CHILD_KEY, border, border_evicted, border_left
from minidtr.runtime.fast.search import TableSearch, lowest
from minidtr.runtime.fast.table import COMPACT_SLACK, LAZY_SLACK, CandidateTable
from minidtr.runtime.heuristics import HEURISTIC_NAMES, ablation_names
from minidtr.testing import isolated_allocator


class FakeStorage:
    __slots__ = ("id", "row", "cost", "nbytes", "last_access", "locks", "allocator")

    def __init__(self, id: int):
        self.id, self.row, self.allocator = id, 0, None
        self.cost, self.nbytes, self.last_access, self.locks = float(id), id % 7, 0.0, 0

    def __repr__(self) -> str:
        return f"S{self.id}"


def kept_table() -> CandidateTable:
    """A table of its own (no allocator), kept as under a budget."""
    table = CandidateTable()
    table.listing = True
    return table


def test_table_behaves_as_an_insertion_ordered_set():
    rng = random.Random(0)
    table, reference = kept_table(), Candidates()
    storages = [FakeStorage(i) for i in range(300)]
    for step in range(5000):
        s = rng.choice(storages)
        if rng.random() < 0.5:
            table.add(s)
            reference.add(s)
        else:
            table.discard(s)
            reference.discard(s)
        assert len(table) == len(reference)
        assert (s in table) == (s in reference)
        if step % 97 == 0:
            assert list(table) == list(reference)
    assert list(table) == list(reference)
    # between decisions, holes are squeezed out once they outnumber the candidates ...
    assert table.rows <= 2 * len(table) + LAZY_SLACK + 1
    # ... and before one, once they pass an eighth of them
    table.sync()
    assert table.rows <= len(table) + len(table) // 8 + COMPACT_SLACK + 1
    assert list(table) == list(reference)


def test_holes_are_squeezed_lazily_between_decisions():
    assert LAZY_SLACK == 1024  # the counts below assume it
    table = kept_table()
    storages = [FakeStorage(i) for i in range(4000)]
    for s in storages:
        table.add(s)
    for s in storages[:2000]:  # more holes than an eighth, not more than the candidates
        table.discard(s)
    assert table.rows == 4001  # not squeezed yet
    table.sync()
    assert table.rows == 2001
    assert list(table) == storages[2000:]
    assert [s.row for s in storages[2000:]] == list(range(1, 2001))
    for s in storages[2000:3600]:
        table.discard(s)
    # squeezed when the 2001 rows passed 2 * 488 + 1024, at 488 candidates (since then
    # 88 more holes)
    assert table.rows == 489
    assert list(table) == storages[3600:]


@pytest.mark.parametrize("one_by_one", [0, 1000])
def test_columns_follow_the_storages_through_the_dirty_rule(monkeypatch, one_by_one):
    from minidtr.runtime.fast import table as candidates

    monkeypatch.setattr(candidates, "SYNC_ONE_BY_ONE", one_by_one)  # arrays / row by row
    rng = random.Random(1)
    table = kept_table()
    storages = [FakeStorage(i) for i in range(200)]
    for _ in range(3000):
        s = rng.choice(storages)
        action = rng.random()
        if action < 0.3:
            table.add(s)
        elif action < 0.45:
            table.discard(s)
        elif action < 0.7:
            s.last_access = float(rng.randrange(100))
            table.dirty[s.row] = 1
        elif action < 0.85:
            s.locks += 1
            s.cost += 1.0  # cost changes only while locked
            table.dirty[s.row] = 1
        elif s.locks:
            s.locks -= 1  # no mark needed: locked rows are re-read until seen unlocked
        if rng.random() < 0.1:
            table.sync()
            for storage in table:
                row = storage.row
                assert table.active[row] and table.storages[row] is storage
                # blocked (locked) rows hold +inf in cost and unit, so they score +inf
                blocked = bool(storage.locks)
                assert table.cost[row] == (np.inf if blocked else storage.cost)
                assert table.unit[row] == (np.inf if blocked else 1.0)
                assert table.nbytes[row] == storage.nbytes
                assert table.size[row] == max(storage.nbytes, 1)
                assert table.last_access[row] == storage.last_access
                assert table.blocked[row] == bool(storage.locks)
            holes = [r for r, s in enumerate(table.storages) if s is None]
            assert not table.active[holes].any() and table.blocked[holes].all()
            assert np.isinf(table.cost[holes]).all() and np.isinf(table.unit[holes]).all()


def test_lowest_is_a_stable_sort_prefix():
    rng = np.random.default_rng(2)
    for _ in range(2000):
        n = int(rng.integers(0, 12))
        values = rng.choice([0.5, 1.0, 2.0, np.inf, -np.inf], n)
        for k in (1, 2, 5):
            expected = sorted(range(n), key=lambda i: values[i])[:k]
            assert lowest(values, k) == expected
    assert lowest(np.array([1.0, np.nan, 0.0]), 2) is None


def build_graph(rng: random.Random, n: int):
    """Tensors of a random DAG of ``n`` ops on 1..4-element vectors, costs from {1, 2, 3}
    (so that scores tie often)."""
    costs = {}

    def cost(op, in_metas, out_metas):
        return costs.setdefault(id(op), float(rng.choice([1, 2, 3])))

    tensors = [md.tensor(np.ones(k, np.float32)) for k in (1, 2, 3, 4)]
    with md.Runtime(cost=cost):
        for _ in range(n):
            a = rng.choice(tensors)
            b = rng.choice([t for t in tensors if t.shape == a.shape] or [a])
            op = rng.choice([lambda x, y: x + y, lambda x, y: x * y, lambda x, y: (x - y).tanh()])
            tensors.append(op(a, b))
    return tensors[4:]


def drive(rng: random.Random, tensors: list, steps: int) -> None:
    """Random decisions (each victim evicted), reads (rematerializing) and decisions made
    while something is locked."""
    from minidtr.runtime import allocator_for

    allocator = allocator_for("cpu")
    for _ in range(steps):
        action = rng.random()
        if action < 0.6:
            victim = allocator.eviction.choose_victim().victim
            if victim is not None:
                allocator.evict(victim)
        elif action < 0.85:
            rng.choice(tensors).numpy()
        else:
            with allocator.holding(rng.choice(tensors).cell.storage):
                allocator.eviction.choose_victim()


HEURISTICS = sorted({*ablation_names(), *HEURISTIC_NAMES})


@pytest.mark.parametrize("heuristic", HEURISTICS)
def test_table_decisions_equal_the_reference_loop(heuristic):
    rng = random.Random(heuristic)
    variants = [
        {},
        {"sample": True},
        {"min_size": 0.6},
        {"record_events": True},
        {"sample": True, "min_size": 0.3, "record_events": True},
    ]
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(rng, 60)
        for options in variants:
            with md.Runtime(budget=1 << 30, heuristic=heuristic, cost="flops", **options):
                drive(rng, tensors, 40)
        if heuristic != "random":
            assert counter["checked"] - before >= 100
        else:  # no table form (a random draw): the loop decides
            assert counter["checked"] == before


def test_budgeted_training_decides_as_the_loop():
    """Real evictions under a tight budget (the victims the allocator itself asks for)."""
    from minidtr.testing import run_under

    def step():
        rng = np.random.default_rng(0)
        x = md.tensor(rng.standard_normal((8, 16)).astype(np.float32))
        w = md.tensor(rng.standard_normal((16, 16)).astype(np.float32), requires_grad=True)
        h = x
        for _ in range(12):
            h = (h @ w).tanh()
        loss = (h * h).sum()
        loss.backward()
        return [loss.numpy(), w.grad.numpy()]

    with checked_decisions() as counter:
        before = counter["checked"]
        for heuristic in ("dtr", "dtr_eq", "msps", "lru"):
            with isolated_allocator():
                runtime = md.Runtime(7000, heuristic, cost="flops", max_slowdown=None)
                run_under(step, runtime)
        assert counter["checked"] - before > 20


@pytest.mark.parametrize("heuristic", ["dtr", "msps"])
def test_bounded_terms_wait_across_decisions_and_squeezes_as_the_loop_decides(
    monkeypatch, heuristic
):
    """Flagged rows scored by a lower bound (``TableSearch.bound_terms``) wait, bounded,
    across decisions and through squeezes of the table (handles dropped at random leave
    holes), and are computed when they could be among the lowest: every decision is the
    loop's. Checks that each of these happened, so that the test covers them."""
    from minidtr.runtime.fast import search
    from minidtr.runtime.fast import table as table_module

    seen = {"carried": 0, "squeezed": 0, "settled": 0}
    bound_terms, compact = search.TableSearch.bound_terms, CandidateTable.compact

    def counting_bound_terms(self, mode, used):
        frontier = self.table.frontier
        if frontier is self.bounded_in:
            seen["carried"] += sum(frontier[row] == search.BOUNDED for row in self.bounded)
        bound_terms(self, mode, used)
        seen["settled"] += bool(self.deferred)

    def counting_compact(self):
        seen["squeezed"] += search.BOUNDED in self.frontier
        compact(self)

    monkeypatch.setattr(search.TableSearch, "bound_terms", counting_bound_terms)
    monkeypatch.setattr(CandidateTable, "compact", counting_compact)
    monkeypatch.setattr(table_module, "COMPACT_SLACK", 2)
    assert drive_and_drop(heuristic, heuristic) >= 150
    assert seen["carried"] and seen["squeezed"] and seen["settled"], seen


def drive_and_drop(seed: str, heuristic: str, **options) -> int:
    """Ten rounds of ``drive`` over a graph of 120 values, each followed by six handles
    dropped at random (holes, then squeezes); returns how many decisions were checked
    against the loop."""
    rng = random.Random(seed)
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(rng, 120)
        with md.Runtime(budget=1 << 30, heuristic=heuristic, cost="flops", **options):
            for _ in range(10):
                drive(rng, tensors, 40)
                for _ in range(6):
                    tensors.pop(rng.randrange(len(tensors)))
        return counter["checked"] - before


@pytest.mark.parametrize("record_events", [False, True])
@pytest.mark.parametrize("heuristic", ["dtr", "msps"])
def test_a_long_list_of_bounded_rows_read_lazily_decides_as_the_loop(
    monkeypatch, heuristic, record_events
):
    """Past ``FILTER_BOUNDED`` entries the list of bounded rows is re-read only once it has
    doubled, so decisions see entries that are no longer bounded (settled, holes) and rows
    listed twice (flagged again and bounded again); with and without the shortlist that
    events record (``settle_deferred``), every decision is the loop's. Checks that stale
    and repeated entries were there, so that the test covers them."""
    from minidtr.runtime.fast import search
    from minidtr.runtime.fast import table as table_module

    seen = {"stale": 0, "repeated": 0, "lazy": 0}
    bound_terms = search.TableSearch.bound_terms

    def counting_bound_terms(self, mode, used):
        frontier = self.table.frontier
        if frontier is self.bounded_in and len(self.bounded) > search.FILTER_BOUNDED:
            seen["lazy"] += len(self.bounded) <= self.filter_at
            seen["stale"] += sum(frontier[row] != search.BOUNDED for row in self.bounded)
            seen["repeated"] += len(self.bounded) - len(set(self.bounded))
        bound_terms(self, mode, used)

    monkeypatch.setattr(search.TableSearch, "bound_terms", counting_bound_terms)
    monkeypatch.setattr(search, "FILTER_BOUNDED", 4)
    monkeypatch.setattr(table_module, "COMPACT_SLACK", 2)
    seed = f"{heuristic} {record_events}"
    assert drive_and_drop(seed, heuristic, record_events=record_events) >= 150
    assert seen["lazy"] and seen["stale"] and seen["repeated"], seen


def test_a_decision_among_rows_that_stay_bounded_does_not_reread_them():
    """Two thousand candidates with no evicted neighbour, all bounded by the first decision
    and none settled since (one is the victim, never evicted here): later decisions keep
    the list of bounded rows as it is instead of reading each row's flag again."""
    from minidtr.runtime.fast.search import BOUNDED

    with isolated_allocator() as allocator:
        base = md.tensor(np.ones(4, np.float32))
        fan = [base * float(i) for i in range(2000)]
        with md.Runtime(budget=1 << 40, heuristic="dtr", cost="flops"):
            eviction = allocator.eviction
            eviction.choose_victim()
            listed = eviction.search.bounded
            assert sum(eviction.search.table.frontier[row] == BOUNDED for row in listed) > 1900
            for _ in range(5):
                eviction.choose_victim()
                assert eviction.search.bounded is listed
        del fan


@pytest.mark.parametrize("record_events", [False, True])
def test_tightened_bounds_stay_below_the_terms_across_decisions(monkeypatch, record_events):
    """A bounded row that a decision gave a tighter bound (``TableSearch.tighten``: its
    neighbours' costs and valid closures) keeps it until it is flagged again: at every
    later decision, after the pending evictions are announced, each such bound is at most
    the row's term walked afresh (``estar.estar_cost``), through evictions, rebuilds,
    frees, squeezes and switches of heuristic; and the decisions are the loop's. Checks
    that bounds were carried, so that the test covers them."""
    from minidtr.runtime import estar
    from minidtr.runtime.fast import search
    from minidtr.runtime.fast import table as table_module

    seen = {"tightened": 0, "carried": 0}
    bound_terms, tighten = search.TableSearch.bound_terms, search.TableSearch.tighten

    def checking_bound_terms(self, mode, used):
        table = self.table
        for row in range(1, used):
            storage = table.storages[row]
            if storage is not None and table.frontier[row] == search.BOUNDED:
                bound = table.term_at[row]
                if bound > 0.0:
                    seen["carried"] += 1
                    assert bound <= estar.estar_cost(storage), (row, storage)
        bound_terms(self, mode, used)

    def counting_tighten(self, heuristic, values, row):
        tightened = tighten(self, heuristic, values, row)
        seen["tightened"] += tightened
        return tightened

    monkeypatch.setattr(search.TableSearch, "bound_terms", checking_bound_terms)
    monkeypatch.setattr(search.TableSearch, "tighten", counting_tighten)
    monkeypatch.setattr(table_module, "COMPACT_SLACK", 2)
    rng = random.Random(7)
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(rng, 160)
        for step in range(12):  # h_MSPS between: back to h_DTR, the closures are stale
            heuristic = "msps" if step % 3 == 2 else "dtr"
            with md.Runtime(1 << 30, heuristic, cost="flops", record_events=record_events):
                drive(rng, tensors, 40)
                for _ in range(6):
                    tensors.pop(rng.randrange(len(tensors)))
        assert counter["checked"] - before >= 150
    assert seen["tightened"] and seen["carried"], seen


class ScoreOnly:
    """A user's heuristic: only ``score``. It is decided by the loop."""

    name = "by-id"

    def score(self, storage, context) -> float:
        return -float(storage.id)


def test_custom_heuristic_objects_use_the_loop():
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(random.Random(3), 20)
        with md.Runtime(budget=1 << 30, heuristic=ScoreOnly()) as rt:
            victim = rt.allocator.eviction.choose_victim().victim
        assert victim is max(tensors, key=lambda t: t.cell.storage.id).cell.storage
        assert counter["checked"] == before


def test_a_cost_term_of_your_own_uses_the_loop(monkeypatch):
    from minidtr.runtime import heuristics

    monkeypatch.setitem(heuristics.COST_TERMS, "negid", lambda s, a: -float(s.id))
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(random.Random(4), 20)
        heuristic = heuristics.Heuristic("negid", "negid", size=False, staleness=False)
        assert not TableSearch.handles(heuristic)
        assert TableSearch.handles(heuristics.make_heuristic("dtr_eq"))
        assert TableSearch.handles(heuristics.make_heuristic("learned"))  # h_DTR's e*
        assert not TableSearch.handles(heuristics.make_heuristic("learned+eq+size+time"))
        with md.Runtime(budget=1 << 30, heuristic=heuristic) as rt:
            victim = rt.allocator.eviction.choose_victim().victim
        assert victim is max(tensors, key=lambda t: t.cell.storage.id).cell.storage
        assert counter["checked"] == before


def test_eq_decisions_survive_mirror_resets(monkeypatch):
    """The union-find mirror is rebuilt whenever it outgrows the table (here: nearly every
    decision); decisions stay the loop's."""
    from minidtr.runtime.fast import eqterms

    monkeypatch.setattr(eqterms, "MIRROR_SLACK", -(10**6))  # a reset at every decision
    rng = random.Random(5)
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(rng, 60)
        with md.Runtime(budget=1 << 30, heuristic="dtr_eq", cost="flops"):
            drive(rng, tensors, 120)
        assert counter["checked"] - before >= 60


def test_class_mirror_labels_follow_the_union_find():
    """Every mirrored component's label is its class's, and the class's cost is its
    root's; a merge or a cost change names the labels it touched."""
    from minidtr.runtime.eqclasses import Component, union
    from minidtr.runtime.fast.mirror import ClassMirror

    rng = random.Random(6)
    mirror = ClassMirror()
    nodes = [Component(float(rng.randint(1, 9)), 1, 1) for _ in range(300)]
    for step in range(1500):
        a, b = rng.choice(nodes), rng.choice(nodes)
        if rng.random() < 0.3:
            mirror.index_of(a)
        ra, rb = a.root(), b.root()
        labels_before = {n.index: int(mirror.label[n.index]) for n in nodes if mirror.mirrored(n)}
        costs_before = mirror.cost.copy()
        mirror.touched = set()
        if ra is not rb:
            merged = union(ra, rb)
            mirror.on_union(merged, rb if merged is ra else ra)
        elif rng.random() < 0.5:
            ra.cost -= 0.5
            mirror.on_cost(ra)
        for n in nodes:
            if mirror.mirrored(n):
                label = int(mirror.label[n.index])
                root = n.root()
                assert mirror.mirrored(root) and int(mirror.label[root.index]) == label
                assert mirror.cost[label] == root.cost
                old = labels_before.get(n.index)
                if old is not None and (old != label or costs_before[old] != mirror.cost[old]):
                    assert {old, label} <= mirror.touched
        if step % 500 == 499:
            mirror.reset()
            assert not any(mirror.mirrored(n) for n in nodes)


@pytest.mark.parametrize("heuristics", [("dtr", "msps"), ("dtr_eq", "dtr"), ("msps", "dtr_eq")])
def test_cached_terms_follow_long_evicted_runs(heuristics):
    """A chain with long runs of evicted storages, rebuilt and evicted again at random:
    the table's cached neighbourhood terms (e*, classes, ancestors) stay the loop's,
    also across a switch of heuristic."""
    from minidtr.runtime import allocator_for

    rng = random.Random(heuristics[0])
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        chain = [md.tensor(np.ones(3, np.float32))]
        with md.Runtime(cost="flops"):
            for _ in range(120):
                chain.append(chain[-1] * 1.5 if rng.random() < 0.5 else chain[-1] + 1.0)
        allocator = allocator_for("cpu")
        for heuristic in heuristics:
            with md.Runtime(budget=1 << 30, heuristic=heuristic, cost="flops"):
                for _ in range(150):
                    action = rng.random()
                    if action < 0.55:
                        victim = allocator.eviction.choose_victim().victim
                        if allocator.eviction.candidates.watching == "eq":
                            assert_bordering_exact(allocator.eviction.candidates)
                        if victim is not None:
                            allocator.evict(victim)
                    elif action < 0.75:
                        storage = rng.choice(chain[1:]).cell.storage
                        if storage.buffer is not None and not storage.locks:
                            allocator.evict(storage)
                    else:
                        rng.choice(chain).numpy()
        assert counter["checked"] - before >= 100


def test_freeing_an_evicted_chain_after_an_msps_run_does_not_walk_its_tail(monkeypatch):
    """msps flags rows by walking every evicted descendant of a change. Outside a budget
    nothing is scored, so the table stops flagging: freeing a chain whose every other
    storage is evicted (and still referenced) once took a walk of the whole remaining
    chain per death, quadratic in its length."""
    from minidtr.runtime import allocator_for
    from minidtr.runtime.storage import Storage

    with isolated_allocator():
        chain = [md.tensor(np.ones(4, np.float32))]
        with md.Runtime(cost="flops"):
            for _ in range(2000):
                chain.append(chain[-1] + 1.0)
        allocator = allocator_for("cpu")
        with md.Runtime(budget=1 << 40, heuristic="msps", cost="flops"):
            for t in chain[1::2]:
                allocator.evict(t.cell.storage)
            allocator.eviction.choose_victim()
        assert allocator.eviction.candidates.watching is None
        calls = 0
        live_children = Storage.live_children

        def counted(self):
            nonlocal calls
            calls += 1
            return live_children(self)

        monkeypatch.setattr(Storage, "live_children", counted)
        evicted = chain[1::2]
        del chain
        assert calls < 10_000, f"{calls} walks to free 2,000 storages"
        del evicted


def test_freeing_an_evicted_chain_under_msps_walks_each_storage_once(monkeypatch):
    """Inside the budget msps keeps flagging, and a walk stops at the evicted storages
    walked since the last decision: freeing a chain whose every other storage is
    evicted walks each storage about once, where it once walked the remaining evicted
    tail per death (some 10^6 steps for these 1,000 evicted storages)."""
    from minidtr.runtime import allocator_for
    from minidtr.runtime.storage import Storage

    with isolated_allocator():
        chain = [md.tensor(np.ones(4, np.float32))]
        with md.Runtime(cost="flops"):
            for _ in range(2000):
                chain.append(chain[-1] + 1.0)
        allocator = allocator_for("cpu")
        with md.Runtime(budget=1 << 40, heuristic="msps", cost="flops"):
            for t in chain[1::2]:
                allocator.evict(t.cell.storage)
            allocator.eviction.choose_victim()
            assert allocator.eviction.candidates.watching == "ancestors"
            walks = steps = 0
            walking = False
            mark_descendants = CandidateTable.mark_descendants
            live_children = Storage.live_children

            def counted_walk(self, storage):
                nonlocal walks, walking
                walks += 1
                walking = True
                try:
                    return mark_descendants(self, storage)
                finally:
                    walking = False

            def counted_step(self):
                nonlocal steps
                steps += walking
                return live_children(self)

            monkeypatch.setattr(CandidateTable, "mark_descendants", counted_walk)
            monkeypatch.setattr(Storage, "live_children", counted_step)
            evicted = chain[1::2]
            del chain
            del evicted
            assert walks >= 1000  # every evicted storage's death was seen
            assert steps <= 2 * walks, f"{steps} steps in {walks} walks to free 2,000 storages"
            monkeypatch.undo()
            with checked_decisions() as counter:  # and the next decision is the loop's
                before = counter["checked"]
                allocator.eviction.choose_victim()
                assert counter["checked"] > before


def assert_bordering_exact(table) -> None:
    """``table.bordering`` lists every row under each label its ``labels`` name, and
    lists no live candidate under a label it does not name (holes may linger)."""
    index = table.bordering
    if index is None:
        return
    width, used = table.edge_width, table.rows
    named: dict[int, set[int]] = {}
    for j in range(width):
        for row, label in enumerate(table.labels[j, :used].tolist()):
            if label:
                named.setdefault(label, set()).add(row)
    for label, rows in named.items():
        missing = rows - index.get(label, set())
        assert not missing, f"rows {sorted(missing)} name label {label} but are not listed"
    for label, rows in index.items():
        extra = {r for r in rows - named.get(label, set()) if table.storages[r] is not None}
        assert not extra, f"live rows {sorted(extra)} listed under label {label} they do not name"


@pytest.mark.parametrize("wide", [None, 2])
@pytest.mark.parametrize("share", [0, 10**9])
def test_eq_bordering_index_follows_merges_rereads_and_compactions(monkeypatch, share, wide):
    """h_DTR^eq's index from class labels to the rows naming them stays exact through
    evictions that merge classes, rebuilds that re-read rows and the compactions that
    renumber rows; share 0 finds the changed rows through the index at every decision,
    a huge share by scanning the labels (the two must decide alike, as the loop)."""
    from minidtr.runtime import allocator_for
    from minidtr.runtime.fast import eqterms
    from minidtr.runtime.fast import table as candidates

    monkeypatch.setattr(eqterms, "BORDER_SCAN_SHARE", share)
    monkeypatch.setattr(candidates, "COMPACT_SLACK", 4)  # compact often
    if wide is not None:  # most rows wide: their paths too decide as the loop
        set_wide(monkeypatch, wide)
    rng = random.Random(7)
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        chain = [md.tensor(np.ones(3, np.float32))]
        with md.Runtime(cost="flops"):
            for _ in range(150):
                a = chain[-1]
                b = chain[rng.randrange(max(0, len(chain) - 6), len(chain))]
                chain.append(a * 1.5 + b if rng.random() < 0.5 else a + 1.0)
        allocator = allocator_for("cpu")
        table = allocator.eviction.candidates
        compactions = 0
        with md.Runtime(budget=1 << 30, heuristic="dtr_eq", cost="flops"):
            for _ in range(400):
                action = rng.random()
                rows = table.rows
                if action < 0.5:
                    victim = allocator.eviction.choose_victim().victim
                    assert_bordering_exact(table)
                    if victim is not None:
                        allocator.evict(victim)
                elif action < 0.7:
                    storage = rng.choice(chain[1:]).cell.storage
                    if storage.buffer is not None and not storage.locks:
                        allocator.evict(storage)
                else:
                    rng.choice(chain).numpy()
                compactions += table.rows < rows
            assert table.edge_width >= 2 and table.bordering  # emptied when the budget ends
        assert counter["checked"] - before >= 150
        assert compactions >= 3


@pytest.mark.parametrize("one_by_one", [0, 10**9])
def test_ratio_column_follows_every_rewrite_and_heuristic_switch(monkeypatch, one_by_one):
    """The table's ``ratio`` column (each row's score before staleness) is updated from
    the rows that sync and the term updates rewrote (``one_by_one`` huge: always row by
    row; 0: always whole) and recomputed for another formula: one allocator goes through
    every heuristic in turn, twice, each deciding as the loop."""
    from minidtr.runtime.fast import eqterms, search
    from minidtr.runtime.fast import table as candidates

    monkeypatch.setattr(search, "RATIOS_ONE_BY_ONE", one_by_one)
    monkeypatch.setattr(candidates, "SYNC_ONE_BY_ONE", 4 if one_by_one else 32)
    monkeypatch.setattr(eqterms, "SYNC_ONE_BY_ONE", 4 if one_by_one else 32)
    rng = random.Random(8)
    names = [h for h in HEURISTICS if h != "random"] * 2
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = build_graph(rng, 60)
        for heuristic in names:
            with md.Runtime(budget=1 << 30, heuristic=heuristic, cost="flops"):
                drive(rng, tensors, 6)
        assert counter["checked"] - before >= 2 * len(names)


def set_wide(monkeypatch, wide: int) -> None:
    from minidtr.runtime.fast import borders, eqterms

    monkeypatch.setattr(borders, "WIDE", wide)
    monkeypatch.setattr(eqterms, "WIDE", wide)


def assert_edges_exact(allocator) -> None:
    """(eq) Every row not flagged for a re-read holds its storage's evicted neighbours
    in ``edges`` (their mirrored union-find nodes, parents then children, in the order
    ``Storage.neighbours`` gives) with their order keys in ``keys``, and 0 past them:
    what a re-read would write, kept up to date by the changes themselves."""
    table, mirror = allocator.eviction.candidates, allocator.eviction.eq_classes.listener
    width = table.edge_width
    for row in range(1, min(table.rows, len(table.frontier))):
        storage = table.storages[row]
        if storage is None or table.frontier[row]:
            continue
        parents = storage.parents
        expected = []
        for place, n in enumerate((*parents, *storage.live_children())):
            if n.buffer is None and not n.banished:
                node = n.component
                assert node is not None and mirror.mirrored(node), f"{n} of row {row}"
                key = place if place < len(parents) else CHILD_KEY + n.id
                expected.append((node.index, key))
        expected += [(0, 0)] * (width - len(expected))
        edges, keys = table.edges[:width, row].tolist(), table.keys[:width, row].tolist()
        found = list(zip(edges, keys, strict=True))
        assert found == expected, f"row {row} ({storage}): edges {found}, graph {expected}"


@pytest.mark.parametrize("wide", [None, 2])
def test_eq_edges_follow_each_eviction_and_rebuild(monkeypatch, wide):
    """h_DTR^eq's edges are kept up to date by each eviction and each storage leaving
    the evicted set (rebuilt, freed), in the neighbours' order, with several changes
    between decisions and compactions renumbering the rows: after every change every
    row not flagged holds what a re-read would, and every decision is the loop's."""
    from minidtr.runtime import allocator_for
    from minidtr.runtime.fast import table as candidates

    monkeypatch.setattr(candidates, "COMPACT_SLACK", 4)  # compact often
    if wide is not None:
        set_wide(monkeypatch, wide)
    rng = random.Random(12)
    with isolated_allocator(), checked_decisions() as counter:
        before = counter["checked"]
        tensors = [md.tensor(np.ones(3, np.float32))]
        with md.Runtime(cost="flops"):
            for _ in range(160):  # up to three parents each, and several children
                picks = [tensors[rng.randrange(max(0, len(tensors) - 8), len(tensors))]]
                picks += rng.sample(tensors, min(len(tensors), rng.randrange(3)))
                out = picks[0] * 1.5
                for other in picks[1:]:
                    out = out + other
                tensors.append(out)
        allocator = allocator_for("cpu")
        table = allocator.eviction.candidates
        bordered = pending = 0
        with md.Runtime(budget=1 << 30, heuristic="dtr_eq", cost="flops"):
            allocator.eviction.choose_victim()
            for _ in range(500):
                action = rng.random()
                if action < 0.2:
                    victim = allocator.eviction.choose_victim().victim
                    if victim is not None:
                        allocator.evict(victim)
                elif action < 0.6:
                    storage = rng.choice(tensors[1:]).cell.storage
                    if storage.buffer is not None and not storage.locks:
                        allocator.evict(storage)
                elif action < 0.97 or len(tensors) < 40:
                    rng.choice(tensors).numpy()
                else:  # free a value: an evicted one leaves the evicted set
                    del tensors[rng.randrange(1, len(tensors))]
                pending += len(table.pending)
                bordered = max(bordered, table.edge_width)
                assert_edges_exact(allocator)
        assert counter["checked"] - before >= 80
        assert pending >= 200 and bordered >= 3  # the changes did the work


def test_eq_border_keeps_a_rows_edges_in_key_order():
    """``borders.border`` inserts an evicted neighbour at its place among a
    row's edges (by order key), takes one out closing the gap, widens the table when a
    row needs one more place, lists the row as pending, and leaves to a re-read (flags)
    a row whose edges do not hold what a change expects."""
    table = kept_table()
    for i in range(3):
        table.add(FakeStorage(i + 1))
    table.sync()
    table.frontier = bytearray(len(table.frontier))  # nothing flagged
    for key, index in ((5, 50), (1, 10), (3, 30)):
        border(table, 1, key, index)
    assert table.edge_width == 3
    assert table.edges[:3, 1].tolist() == [10, 30, 50]
    assert table.keys[:3, 1].tolist() == [1, 3, 5]
    border(table, 1, 3, 0)
    assert table.edges[:3, 1].tolist() == [10, 50, 0]
    assert table.keys[:3, 1].tolist() == [1, 5, 0]
    assert table.pending == [1, 1, 1, 1] and not table.frontier[1]
    border(table, 2, 9, 90)
    assert table.edges[:3, 2].tolist() == [90, 0, 0]
    border(table, 1, 7, 0)  # not there
    assert table.frontier[1]
    border(table, 1, 1, 0)  # flagged rows wait for their re-read
    assert table.edges[:3, 1].tolist() == [10, 50, 0]
    border(table, 2, 9, 91)  # already there
    assert table.frontier[2] and table.pending == [1, 1, 1, 1, 2]


def test_eq_border_around_a_storage_reaches_each_neighbours_row():
    """``border_evicted`` puts a storage into its parents' rows (by its id past
    ``CHILD_KEY``) and its children's (by its place among their parents),
    ``border_left`` takes it out, and a child that no longer names it as a parent is
    left to a re-read."""

    class Node(FakeStorage):
        __slots__ = ("parents", "outputs")

        def live_children(self):
            return self.outputs

    table = kept_table()
    parent, child, stranger, evicted = (Node(i + 1) for i in range(4))
    for node in (parent, child, stranger):
        table.add(node)
    table.sync()
    table.frontier = bytearray(len(table.frontier))
    evicted.parents, evicted.outputs = (parent,), [child, stranger]
    child.parents, stranger.parents = (parent, evicted), (parent,)
    border_evicted(table, evicted, 7)
    assert table.edges[:1, [parent.row, child.row]].tolist() == [[7, 7]]
    assert table.keys[:1, [parent.row, child.row]].tolist() == [[CHILD_KEY + evicted.id, 1]]
    assert table.frontier[stranger.row] and not table.frontier[child.row]
    border_left(table, evicted)
    assert table.edges[:1, [parent.row, child.row]].tolist() == [[0, 0]]
    assert table.pending == [parent.row, child.row] * 2


def test_the_closures_read_the_neighbours_without_a_function_per_call():
    """``evicted_parents`` / ``evicted_children`` run for each closure built and each term
    (about a thousand times a budgeted LSTM step at 0.3): written as loops, since under
    CPython 3.11 a list comprehension makes and calls a function of its own each time
    (-1.3% instructions of that step); they find what ``estar``'s find, in its order."""
    import types

    from minidtr.runtime import allocator_for, estar
    from minidtr.runtime.fast import closures

    hot = (
        closures.evicted_parents,
        closures.evicted_children,
        closures.CachedClosures._closure,
        closures.CachedClosures._union_cost,
    )
    for function in hot:
        nested = [c.co_name for c in function.__code__.co_consts if isinstance(c, types.CodeType)]
        assert not nested, f"{function.__qualname__} makes {nested} at each call"
    with isolated_allocator():
        x = md.tensor(np.ones(3, np.float32))
        with md.Runtime(cost="flops"):
            a = x + 1.0
            b, c = a * 2.0, a + 3.0
            d = b + c
        allocator = allocator_for("cpu")
        with md.Runtime(budget=1 << 30, cost="flops"):
            for t in (a, c):
                allocator.evict(t.cell.storage)
            for t in (x, a, b, c, d):
                storage = t.cell.storage
                for fast, reference in (
                    (closures.evicted_parents, estar.evicted_parents),
                    (closures.evicted_children, estar.evicted_children),
                ):
                    assert fast(storage) == reference(storage)
            assert [s.id for s in closures.evicted_children(a.cell.storage)] == [c.cell.storage.id]
