"""Where a sweep's tasks run: here, a local process pool, any ``concurrent.futures``
executor, or a Dask cluster. One seam, used by ``sweep`` and ``compare_with_optimal``.

A task is ``fn(trace, *args)``. The traces are the large part of every task, so
each backend ships them as few times as it can:

- ``jobs=1``: in this process, in order (unless ``isolate``: then in one worker).
- the default, a local pool of ``jobs`` processes (all cores): each worker gets the
  traces once, when it starts.
- ``client=`` a ``dask.distributed.Client``: the traces are scattered to every worker
  once (``broadcast``); a task names its trace by that handle. A worker that dies
  costs only the tasks it was running: the scheduler runs them again elsewhere, and
  each task may also be retried (``retries``) if it raises.
- ``executor=`` any other ``concurrent.futures.Executor``: each task carries its
  trace (the generic interface has no way to share data between tasks).

``run`` yields ``(task index, result)`` as tasks finish, in whatever order, so
callers can write results as they come and a progress bar can follow them. On an
interrupt (Ctrl-C) or an error, the tasks not yet started are cancelled, and the
local pool's workers are stopped at once, running tasks included.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from typing import Any

Task = tuple[int, tuple]  # (trace index, further arguments of fn)

_TRACES: list[Any] = []


def _init_worker(traces: list[Any]) -> None:
    """Runs once in each local pool worker. The parent handles Ctrl-C for the whole
    sweep, so workers ignore it rather than each printing a traceback."""
    global _TRACES
    _TRACES = traces
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call_with_shared(fn: Callable, index: int, args: tuple) -> Any:
    return fn(_TRACES[index], *args)


def run(
    fn: Callable[..., Any],
    traces: Sequence[Any],
    tasks: Sequence[Task],
    *,
    jobs: int | None = None,
    client: Any = None,
    executor: Executor | None = None,
    retries: int = 1,
    isolate: bool = False,
) -> Iterator[tuple[int, Any]]:
    """Run ``fn(traces[i], *args)`` for every ``(i, args)`` in ``tasks``; yield
    ``(position in tasks, result)`` as each finishes. ``fn`` must be importable
    (a module-level function) for every backend but ``jobs=1``. ``isolate``: locally,
    run even a single job in a worker process, which Ctrl-C stops at once (a solver's
    C code returns to Python only when it is done, so in this process a Ctrl-C waited
    for the time limit)."""
    if client is not None and executor is not None:
        raise ValueError("give either client= (Dask) or executor=, not both")
    if not tasks:
        return
    if client is not None:
        yield from _run_dask(fn, traces, tasks, client, retries)
    elif executor is not None:
        futures = {executor.submit(fn, traces[i], *args): n for n, (i, args) in enumerate(tasks)}
        yield from _drain(futures)
    else:
        jobs = min(jobs or os.cpu_count() or 1, len(tasks))
        if jobs <= 1 and not isolate:
            for n, (i, args) in enumerate(tasks):
                yield n, fn(traces[i], *args)
            return
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        pool = ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_init_worker, initargs=(list(traces),)
        )
        try:
            futures = {
                pool.submit(_call_with_shared, fn, i, args): n for n, (i, args) in enumerate(tasks)
            }
            yield from _drain(futures)
        except BaseException:
            # Ctrl-C, an error, or the caller stopping early: the running replays' results
            # are not wanted, and one can take minutes, so stop the workers now rather than
            # wait for them (they ignore SIGINT).
            _stop_workers(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


def _drain(futures: dict) -> Iterator[tuple[int, Any]]:
    try:
        for future in as_completed(futures):
            yield futures.pop(future), future.result()
    finally:
        for future in futures:
            future.cancel()


def _run_dask(fn, traces, tasks, client, retries) -> Iterator[tuple[int, Any]]:
    from distributed import as_completed as dask_completed
    from distributed.client import FutureCancelledError

    # hash=False: fresh keys, never shared with (and released by) an earlier sweep
    handles = _scatter(client, list(traces))

    def submit(n: int):
        i, args = tasks[n]
        return client.submit(fn, handles[i], *args, retries=retries, pure=False)

    futures = {submit(n): n for n in range(len(tasks))}
    lost = dict.fromkeys(range(len(tasks)), 0)
    completed = dask_completed(list(futures))
    try:
        for future in completed:
            n = futures.pop(future)
            try:
                result = future.result()
            except FutureCancelledError:
                # a worker died holding its result, or the only copy of its trace that the
                # scheduler knew of: send the trace again where needed and run it again
                if lost[n] >= retries + 2:
                    raise
                lost[n] += 1
                i = tasks[n][0]
                if handles[i].status != "finished":
                    handles[i] = _scatter(client, traces[i])
                again = submit(n)
                futures[again] = n
                completed.add(again)
                continue
            future.release()  # the result is here now: a lost worker must not recompute it
            yield n, result
    finally:
        if futures:
            client.cancel(list(futures))
        futures.clear()
        handles.clear()


class WorkerImportError(RuntimeError):
    """A Dask worker cannot unpickle the traces: it has no minidtr to import."""


def _scatter(client: Any, data: Any) -> Any:
    try:
        return client.scatter(data, broadcast=True, hash=False)
    except Exception as e:  # Dask wraps the worker's error in a bare Exception
        if "No module named 'minidtr" not in str(e):
            raise
        raise WorkerImportError(
            f"a Dask worker cannot import minidtr ({e}): every machine needs the same "
            "minidtr version installed"
        ) from None


def connect(address: str, security: Any = None, timeout: float = 10.0) -> Any:
    """A Dask client for a running scheduler (``dask scheduler`` / ``dask worker``).

    ``security`` is a ``distributed.security.Security`` (see ``tls_security``); without
    one, Dask's configuration decides (``distributed.comm.tls`` in a Dask config file).
    Whoever runs the scheduler runs code here: the results it sends are unpickled."""
    try:
        from distributed import Client
        from distributed.security import Security
    except ImportError as e:
        raise ImportError("running on a cluster needs Dask: pip install 'minidtr[dask]'") from e
    security = Security() if security is None else security
    _check_handshake(address, security, timeout)
    return Client(address, security=security, timeout=f"{timeout}s")


def _check_handshake(address: str, security: Any, timeout: float) -> None:
    """Connect and exchange Dask's handshake within ``timeout`` s, before ``Client`` does
    it without a time limit (a server that accepts and stays silent would hang it), and
    refuse a peer that does not speak Dask's protocol: ``ValueError`` (the address or the
    encryption setting), ``TimeoutError`` (no answer), ``OSError`` (no connection)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect as dask_connect
    from distributed.comm import parse_address

    if security.require_encryption and parse_address(address)[0] != "tls":
        raise ValueError(
            "Dask's configuration requires encryption (distributed.comm.require-encryption):"
            f" use the scheduler's tls:// address, not {address}"
        )

    async def handshake() -> None:
        args = security.get_connection_args("client")
        comm = await dask_connect(address, timeout=timeout, **args)
        await comm.close()

    async def bounded() -> None:
        await asyncio.wait_for(handshake(), timeout)

    # a thread of its own: the caller may be running an event loop (a notebook)
    with ThreadPoolExecutor(1) as thread:
        try:
            thread.submit(asyncio.run, bounded()).result()
        except TimeoutError:
            raise TimeoutError(
                f"no Dask handshake within {timeout:g} s: is it a Dask scheduler?"
            ) from None
        except OSError:
            raise
        except Exception as e:  # what a peer that is not Dask makes Dask's reader do
            raise ValueError(
                f"it does not speak Dask's protocol ({type(e).__name__}): is it a Dask scheduler?"
            ) from None


def tls_security(ca_file: str | None, cert: str | None, key: str | None = None) -> Any:
    """The ``Security`` of a client of a ``tls://`` scheduler: the certificate authority
    that signed the cluster's certificates, this client's certificate and its key (None
    when the certificate file holds the key too). Encryption is required: a ``tcp://``
    address is refused rather than used in the clear."""
    from distributed.security import Security

    return Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert,
        tls_client_key=key,
        require_encryption=True,
    )


def configured_tls() -> bool:
    """Whether Dask's configuration (a Dask config file, or ``DASK_*`` variables) names a
    certificate authority for TLS."""
    import dask

    return bool(dask.config.get("distributed.comm.tls.ca-file", None))


def wait_for_workers(client: Any, timeout: float) -> None:
    """Return once the scheduler has a worker; ``TimeoutError`` after ``timeout`` s."""
    client.wait_for_workers(1, timeout=timeout)
