"""``--scheduler`` and its options, for the commands that can run their replays on a Dask
cluster (``minidtr sim`` and ``minidtr sim optimal``).

A Dask cluster runs code as whoever connects to it, and the other way round: the
scheduler sends pickled tasks that its workers unpickle and pickled results that this
command unpickles, so whoever controls the scheduler (or can speak for it on the
network) runs code as the user. ``tcp://`` is neither authenticated nor encrypted; a
``tls://`` scheduler with the cluster's certificates (``--tls-ca-file``, ``--tls-cert``,
``--tls-key``, or ``distributed.comm.tls`` in a Dask config file) proves that both ends
hold a certificate the cluster's authority signed, and encrypts the traffic. It does not
make an untrusted cluster safe: anyone with such a certificate can do the same.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..cli_args import check_input, positive_seconds

DEFAULT_WORKER_TIMEOUT = 30.0  # seconds to wait for a scheduler's first worker
# What --scheduler takes: tcp:// (the default scheme) or tls://, a host and a port.
ADDRESS = re.compile(r"((?P<scheme>[a-z]+)://)?(?P<host>\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d+")

TRUST_NOTE = (
    "Only give a scheduler you trust: its workers and this command unpickle what it "
    "sends, so whoever runs it runs code as you. tcp:// is neither authenticated nor "
    "encrypted; tls:// with the cluster's certificates is both (it keeps out whoever has "
    "no certificate, not whoever has one)."
)


@dataclass(frozen=True)
class ClusterSettings:
    """Where to run: a scheduler's address, the client's TLS files (certificate
    authority, certificate, key: None when Dask's configuration gives them, or for
    ``tcp://``) and how long to wait for a first worker."""

    address: str
    tls_files: tuple[str, str, str | None] | None = None
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """``--scheduler`` and its TLS and timeout options, as one group of ``p``'s help."""
    group = p.add_argument_group("on a Dask cluster", TRUST_NOTE)
    group.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the replays on a Dask cluster (tls://host:8786, or tcp://host:8786 on a "
        "network you trust; pip install 'minidtr[dask]') instead of local processes",
    )
    group.add_argument(
        "--tls-ca-file",
        metavar="PEM",
        help="for a tls:// scheduler: the certificate authority that signed the "
        "cluster's certificates",
    )
    group.add_argument(
        "--tls-cert", metavar="PEM", help="for a tls:// scheduler: this client's certificate"
    )
    group.add_argument(
        "--tls-key",
        metavar="PEM",
        help="for a tls:// scheduler: this client's private key (when --tls-cert does not "
        "hold it too)",
    )
    group.add_argument(
        "--worker-timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="give up when the scheduler has no worker after this long (default "
        f"{DEFAULT_WORKER_TIMEOUT:g})",
    )


def cluster_settings(
    p: argparse.ArgumentParser, args: argparse.Namespace
) -> ClusterSettings | None:
    """The cluster ``args`` name (None: local processes), or a usage error (exit 2) for
    options that cannot be used together, before any work."""
    tls_flags = _tls_flags_given(args)
    if args.scheduler is None:
        given = [*tls_flags, *(["--worker-timeout"] if args.worker_timeout else [])]
        if given:
            p.error(f"{', '.join(given)}: only with --scheduler ADDRESS")
        return None
    _check_address(p, args.scheduler)
    if getattr(args, "jobs", None) is not None:
        p.error(
            "--jobs counts local processes; with --scheduler the cluster's workers run the "
            "replays: give one or the other"
        )
    timeout = args.worker_timeout or DEFAULT_WORKER_TIMEOUT
    if not args.scheduler.startswith("tls://"):
        if tls_flags:
            p.error(f"{', '.join(tls_flags)}: for a tls:// scheduler, not {args.scheduler}")
        return ClusterSettings(args.scheduler, None, timeout)
    return ClusterSettings(args.scheduler, _tls_files(p, args, tls_flags), timeout)


def _check_address(p: argparse.ArgumentParser, address: str) -> None:
    match = ADDRESS.fullmatch(address)
    if match is None or match["scheme"] not in (None, "tcp", "tls"):
        p.error(
            f"--scheduler: expected tls://HOST:PORT or tcp://HOST:PORT (a Dask scheduler's "
            f"address), got {address!r}"
        )


def _tls_flags_given(args: argparse.Namespace) -> list[str]:
    flags = {"--tls-ca-file": args.tls_ca_file, "--tls-cert": args.tls_cert}
    flags["--tls-key"] = args.tls_key
    return [flag for flag, value in flags.items() if value is not None]


def _tls_files(
    p: argparse.ArgumentParser, args: argparse.Namespace, given: list[str]
) -> tuple[str, str, str | None] | None:
    """The TLS files of a ``tls://`` scheduler (None: Dask's configuration names them)."""
    if not given:
        if _configured_tls():
            return None
        p.error(
            f"{args.scheduler} needs the cluster's certificates: --tls-ca-file and "
            "--tls-cert (with --tls-key when the certificate file does not hold the key), "
            "or distributed.comm.tls in a Dask config file"
        )
    if args.tls_ca_file is None or args.tls_cert is None:
        p.error("a tls:// scheduler needs both --tls-ca-file and --tls-cert")
    for path in (args.tls_ca_file, args.tls_cert, args.tls_key):
        if path is not None:
            check_input(p.prog, path)
    return args.tls_ca_file, args.tls_cert, args.tls_key


def _configured_tls() -> bool:
    try:
        from .parallel import configured_tls

        return configured_tls()
    except ImportError:  # no Dask: connecting says so
        return True


@contextlib.contextmanager
def cluster(settings: ClusterSettings | None) -> Iterator[Any]:
    """A Dask client of the scheduler ``settings`` name, once it has a worker, for the
    body; None (local processes) without settings. What can go wrong with the cluster is
    a ``ValueError`` of one line: Dask missing, the scheduler unreachable (or refusing
    the certificates), no worker within the timeout, the scheduler or every worker lost."""
    if settings is None:
        yield None
        return
    from . import parallel

    address = settings.address
    try:
        tls = settings.tls_files
        security = None if tls is None else parallel.tls_security(*tls)
        client = parallel.connect(address, security)
    except ImportError as e:
        raise ValueError(str(e)) from None
    except (OSError, ValueError, TypeError) as e:  # Dask's words for what went wrong
        raise ValueError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    with client, _dask_logs_quiet():
        _wait_for_a_worker(client, settings)
        yield from _lost_cluster_as_errors(client, address)


@contextlib.contextmanager
def _dask_logs_quiet() -> Iterator[None]:
    """Dask's client logs what goes wrong (a lost scheduler, with tracebacks) on stderr;
    the command says it in one line instead."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _wait_for_a_worker(client: Any, settings: ClusterSettings) -> None:
    from .parallel import wait_for_workers

    try:
        wait_for_workers(client, settings.worker_timeout)
    except TimeoutError:
        raise ValueError(
            f"the Dask scheduler at {settings.address} has no worker after "
            f"{settings.worker_timeout:g} s: start some (dask worker {settings.address}), "
            "or wait longer with --worker-timeout"
        ) from None


class ClusterLostError(ValueError):
    """The scheduler, or every worker, went away during the run: the results received
    before are good (a sweep's --csv holds them)."""


def _lost_cluster_as_errors(client: Any, address: str) -> Iterator[Any]:
    from .parallel import WorkerImportError

    try:
        yield client
    except WorkerImportError as e:
        raise ValueError(str(e)) from None
    except TimeoutError as e:  # every worker went away: nowhere to send the traces
        raise ClusterLostError(f"the Dask scheduler at {address} lost its workers: {e}") from None
    except OSError as e:  # CommClosedError, or Dask's reconnect giving up
        if not _is_comm_error(e) and client.status == "running":
            raise  # not the cluster's: an output file that failed
        raise ClusterLostError(f"lost the Dask scheduler at {address}: {e}") from None


def _is_comm_error(e: OSError) -> bool:
    from distributed.comm import CommClosedError

    return isinstance(e, CommClosedError)
