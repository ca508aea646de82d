"""The two places minidtr's eviction departs from the paper's simulator, and their switches:
orphan rebuild (at most once between reads) and freeing dead rematerialized storages."""

from minidtr import sim
from minidtr.sim.simulator import Replayer
from minidtr.sim.trace import Call, Constant, Release, Result


def run(instructions, budget, heuristic, **options):
    trace = sim.make_trace(instructions)
    replayer = Replayer(budget, heuristic, **options)
    for ins in trace.instructions:
        replayer.step(ins)
    return replayer


# an op that takes a while and whose output dies at once: what came before it is stale
AGING = [Call("wait", ("x",), (Result("w", 1),), 1000.0), Release("w")]


def test_an_orphan_is_rebuilt_at_most_once_between_reads():
    # o = cat(p1, p2) is by far the cheapest storage to recompute, so h_DTR^local (c / (m * s))
    # evicts it whenever room is needed. p1's death rebuilds it (an orphan no larger than
    # p1); it is evicted again unread; p2's death must not rebuild it once more (that would
    # also rebuild the dead p1).
    instructions = [
        Constant("x", 1),
        Call("f1", ("x",), (Result("p1", 50),), 100.0),
        Call("f2", ("x",), (Result("p2", 50),), 100.0),
        Call("cat", ("p1", "p2"), (Result("o", 50),), 0.001),
        *AGING,
        Call("big", ("x",), (Result("q", 30),), 1.0),  # 181 > 160: o goes
        Release("p1"),  # o is rebuilt from p1 and p2 (q goes), then p1 is evicted
        *AGING,
        Call("big2", ("x",), (Result("r", 60),), 1.0),  # o goes again, unread
        Release("p2"),
    ]
    replayer = run(instructions, 160, "dtr_local")
    assert replayer.stats.orphan_remats == 1
    assert not replayer.resident("o")
    # once o is read, a later parent's death may rebuild it again
    replayer.step(Call("read", ("o",), (), 0.0))
    assert replayer.resident("o")
    replayer.close()


def test_an_orphan_larger_than_its_parent_keeps_the_parent_instead():
    # o = g(p) is twice p's size: rebuilding o at p's death would hold more bytes than
    # keeping p, which stays resident (useful: o's rebuild needs it) and o stays evicted
    instructions = [
        Constant("x", 1),
        Call("f", ("x",), (Result("p", 20),), 1.0),
        Call("g", ("p",), (Result("o", 40),), 0.001),
        *AGING,
        Call("big", ("x",), (Result("q", 30),), 1.0),  # 91 > 80: o goes
        Release("p"),
    ]
    for rebuild in (True, False):
        replayer = run(instructions, 80, "dtr_local", rebuild_orphans=rebuild)
        p = replayer.cells["o"].storage.parents[0]
        assert replayer.stats.orphan_remats == 0 and not replayer.resident("o")
        assert (p.buffer is not None) == rebuild  # kept while useful, unless switched off
        replayer.step(Call("read", ("o",), (), 0.0))
        assert replayer.stats.remats == (1 if rebuild else 2)
        replayer.close()
    smaller = [*instructions[:2], Call("g", ("p",), (Result("o", 20),), 0.001), *instructions[3:]]
    replayer = run(smaller, 70, "dtr_local")  # 71 > 70: o goes; at p's death it is rebuilt
    assert replayer.stats.orphan_remats == 1 and replayer.resident("o")
    replayer.close()


def chain_with_a_dead_parent():
    return [
        Constant("x", 10),
        Call("f", ("x",), (Result("a", 100),), 1.0),
        Call("g", ("a",), (Result("b", 100),), 1.0),
        Release("a"),  # a is dead: evicted at once (eager)
        Call("h", ("x",), (Result("c", 100),), 1.0),
        Call("h2", ("x",), (Result("d", 100),), 1.0),  # 310 > 300: b, the stalest, is evicted
        Call("read", ("b",), (), 0.0),  # rebuilds the dead a, then b
    ]


def test_dead_rematerialized_storages_are_freed_unless_kept():
    for keep in (False, True):
        replayer = run(chain_with_a_dead_parent(), 300, "dtr", keep_dead_remats=keep)
        b = replayer.cells["b"].storage
        (a,) = b.parents
        assert a.external_refs == 0 and replayer.resident("b")
        assert (a.buffer is not None) == keep
        assert replayer.allocator.memory <= 300
        replayer.close()
    trace = sim.make_trace(chain_with_a_dead_parent())
    result = sim.simulate(trace, budget=300, outputs=False)
    kept = sim.simulate(trace, budget=300, outputs=False, keep_dead_remats=True)
    assert result.status == kept.status == "ok"
    assert result.dead_evictions == kept.dead_evictions + 1


def test_a_dead_remat_stays_while_an_evicted_sibling_needs_it():
    # b and c are both made from a, which dies; LRU evicts b and c for big2. Reading b
    # rebuilds a (dead) and b; c is still evicted and its rebuild needs a, so a stays
    # resident and reading c rebuilds c alone; then nothing below a needs it and it goes.
    instructions = [
        Constant("x", 1),
        Call("f", ("x",), (Result("a", 40),), 1.0),
        Call("g", ("a",), (Result("b", 20),), 1.0),
        Call("h", ("a",), (Result("c", 20),), 1.0),
        Release("a"),
        Call("k", ("x",), (Result("big", 40),), 1.0),
        Call("k2", ("x",), (Result("big2", 59),), 1.0),  # 140 > 100: b and c go
    ]
    replayer = run(instructions, 100, "lru")
    assert not replayer.resident("b") and not replayer.resident("c")
    (a,) = replayer.cells["b"].storage.parents
    replayer.step(Call("read", ("b",), (), 0.0))
    assert replayer.stats.remats == 2 and a.buffer is not None
    replayer.step(Call("read", ("c",), (), 0.0))
    assert replayer.stats.remats == 3  # c alone, not a again
    assert a.buffer is None and replayer.allocator.memory == 41  # x, b, c
    replayer.close()


def test_a_dying_storage_stays_while_an_evicted_grandchild_needs_it():
    # q (dead, evicted) sits between p and the evicted, referenced r: evicting p when it
    # dies would make r's rebuild need p's rebuild too, so p stays until r is back.
    instructions = [
        Constant("x", 1),
        Call("f", ("x",), (Result("p", 10),), 1.0),
        Call("g", ("p",), (Result("q", 10),), 1.0),
        Call("h", ("q",), (Result("r", 10),), 1.0),
        Release("q"),
        Call("tick", ("x",), (), 1.0),
        Call("touch", ("p",), (), 0.0),  # p is read after r was made: r is the stalest
        Call("k", ("x",), (Result("big", 80),), 1.0),  # 101 > 100: r, the stalest, goes
        Release("p"),
    ]
    replayer = run(instructions, 100, "lru")
    p = replayer.cells["r"].storage.parents[0].parents[0]
    assert not replayer.resident("r") and p.buffer is not None and p.external_refs == 0
    replayer.step(Call("read", ("r",), (), 0.0))
    assert replayer.stats.remats == 2  # q and r; p was still resident
    assert p.buffer is None and replayer.allocator.memory == 11  # x, r
    replayer.close()
    plain = run(instructions, 100, "lru", rebuild_orphans=False)
    plain.step(Call("read", ("r",), (), 0.0))
    assert plain.stats.remats == 3  # p evicted when it died: p, q and r
    plain.close()
