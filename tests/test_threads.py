"""Threads sharing a device: each op, read and death holds the allocator's lock, so two
threads' programs interleave a whole op at a time and every count stays exact.

Before the lock, two threads making tensors on the CPU at once left the allocator
``busy`` for good (each saved the other's flag and put it back) and every later death
waited in its queue: 1.2 MB counted after both threads had dropped everything.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import minidtr as md

N_THREADS = 3


@pytest.fixture(autouse=True)
def often_switching(fresh_allocator):
    """Switch threads every microsecond, so that their ops interleave within each op."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def program(seed: int, steps: int) -> list[float]:
    """A small training loop of this thread's own: a chain of ten layers whose outputs
    backward reads (what a budget evicts), reads, updates, deaths."""
    rng = np.random.default_rng(seed)
    w = md.tensor(rng.standard_normal((32, 32)).astype(np.float32) / 6, requires_grad=True)
    x = md.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    losses = []
    for _ in range(steps):
        h = x
        for _ in range(10):
            h = (h @ w).tanh() * 0.5 + 1.0
        loss = (h * h).mean()
        loss.backward()
        losses.append(float(loss.numpy()))
        w = md.tensor(w.numpy() - 0.1 * w.grad.numpy(), requires_grad=True)
    return losses


def run_in_threads(work, args: list) -> list:
    """``work(*a)`` for each ``a`` of ``args``, each in a thread of its own, all at once;
    what each returned (or raised)."""
    results: list = [None] * len(args)
    start = threading.Barrier(len(args))

    def run(i):
        start.wait()
        try:
            results[i] = work(*args[i])
        except BaseException as e:  # noqa: BLE001 (the test reads it)
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def settled(allocator) -> None:
    """Nothing counted, nothing waiting: what one thread's program leaves behind."""
    assert not allocator.busy and allocator.accesses == 0
    assert not allocator.lifetimes.dying and not allocator.lifetimes.released
    assert allocator.memory == 0 and allocator.constant_bytes == 0


def test_threads_computing_at_once_get_their_own_results_and_leave_nothing(fresh_allocator):
    alone = [program(seed, 10) for seed in range(N_THREADS)]
    settled(fresh_allocator)
    together = run_in_threads(program, [(seed, 10) for seed in range(N_THREADS)])
    assert together == alone
    settled(fresh_allocator)


def test_a_budget_holds_while_another_thread_computes(fresh_allocator):
    """Two threads run under one budget (a device has one), below what either needs
    alone without evicting: each evicts and rebuilds values of both, and gets exactly
    its unbudgeted results."""
    alone = [program(seed, 10) for seed in range(2)]
    with md.Runtime(budget=50_000) as runtime:
        together = run_in_threads(program, [(seed, 10) for seed in range(2)])
    assert together == alone
    stats = runtime.stats()
    assert stats["peak_memory"] <= 50_000 and stats["remats"] > 0
    settled(fresh_allocator)


def test_values_dropped_in_another_thread_are_freed(fresh_allocator):
    """Handles made in one thread and dropped in another (a queue between a producer
    and a consumer) are released there, while the first goes on computing."""
    made = [md.tensor(np.full(256, i, np.float32)) * 2.0 for i in range(2000)]
    total = sum(t.nbytes for t in made)
    assert fresh_allocator.memory >= total

    def drop_all():
        while made:
            made.pop()

    def compute():
        y = md.tensor(np.ones(64, np.float32))
        for _ in range(2000):
            y = (y * 1.0001).tanh()
        return float(y.numpy()[0])

    dropped, value = run_in_threads(lambda job: job(), [(drop_all,), (compute,)])
    assert dropped is None and value == compute()
    settled(fresh_allocator)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (fork with threads, 3.12+)
def test_a_fork_while_another_thread_computes_gives_a_child_that_computes(fresh_allocator):
    """A fork waits until no thread is inside an allocator: the child neither inherits a
    lock held by a thread it does not have (its first op would wait forever: half of
    twenty forks did before ``register_at_fork``) nor an op half done."""
    stop = threading.Event()

    def compute():
        y = md.tensor(np.ones(64, np.float32))
        while not stop.is_set():
            y = (y * 1.0).tanh()

    thread = threading.Thread(target=compute)
    thread.start()
    outcomes = []
    try:
        for _ in range(10):
            pid = os.fork()
            if pid == 0:  # the child: one op, then out without running the parent's code
                x = md.tensor(np.ones(4, np.float32)) * 2.0
                os._exit(0 if float(x.numpy()[0]) == 2.0 else 3)
            deadline = time.monotonic() + 20
            while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
                time.sleep(0.01)
            if not done[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                outcomes.append("hung")
            else:
                outcomes.append(os.waitstatus_to_exitcode(done[1]))
    finally:
        stop.set()
        thread.join(30)
    assert outcomes == [0] * 10


EXITING_WITH_A_DAEMON = """
import gc, threading, time
import numpy as np
import minidtr as md

gc.disable()  # (the cycles below wait for the collection the exit runs)


def compute():
    y = md.tensor(np.ones(1_000_000, np.float32))
    while True:
        y = (y * 1.0).tanh()


threading.Thread(target=compute, daemon=True).start()
for _ in range(50):
    holder = {"tensor": md.tensor(np.ones(64, np.float32)) * 2.0}
    holder["me"] = holder
del holder
time.sleep(0.05)
print("done")
"""


def test_a_program_ends_while_a_daemon_thread_computes(tmp_path):
    """At exit the interpreter stops a daemon thread wherever it is, perhaps inside an op
    with its allocator's lock; the garbage the exit then collects holds tensors whose
    deaths wait for that lock. The main thread takes the locks first (at exit): such a
    program hung every time before."""
    script = tmp_path / "daemon.py"
    script.write_text(EXITING_WITH_A_DAEMON)
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]


def test_a_runtime_whose_thread_ended_can_be_left_and_built_on(fresh_allocator):
    """A thread that ended inside its runtime (or that a forked child does not have) left
    that runtime on the allocator's stack for good: every later runtime was refused as
    "active in another thread", and leaving it as "leave it there"."""
    abandoned = md.Runtime(budget=10**7)
    thread = threading.Thread(target=abandoned.__enter__)
    thread.start()
    thread.join()
    assert not abandoned.owner_alive
    with md.Runtime(budget=10**6):  # above it
        assert (md.ones((10, 10)) * 2).sum().item() == 200.0
    abandoned.__exit__(None, None, None)
    assert len(fresh_allocator.runtimes) == 1


FORKED_FROM_A_THREAD = """
import multiprocessing as mp, threading
import minidtr as md

def work(i):
    with md.Runtime(budget=10**6):
        return (md.ones((10, 10)) * i).sum().item()

def loader():
    with mp.get_context("fork").Pool(2) as pool:
        print(pool.map(work, range(3)))

if __name__ == "__main__":
    with md.Runtime(budget=10**7):
        thread = threading.Thread(target=loader)
        thread.start()
        thread.join()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_pool_forked_from_a_thread_inside_a_runtime_runs(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(FORKED_FROM_A_THREAD)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "[0.0, 100.0, 200.0]", done.stderr[-2000:]
