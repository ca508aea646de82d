"""``minidtr sim --scheduler``: a sweep over a TLS cluster with generated certificates, the
TLS options checked before any work, and a scheduler without workers or with the wrong
certificates in one line, and so a server that is not a Dask scheduler, a
scheduler lost mid-sweep and a worker without minidtr (minidtr/sim/cluster_cli.py)."""

import contextlib
import logging
import shutil
import socket
import subprocess
import threading

import pytest

from minidtr.sim.cli import main
from minidtr.sim.experiments import chain_trace
from minidtr.sim.sweep import read_csv, sweep
from minidtr.sim.trace import write_log

distributed = pytest.importorskip("distributed")

RATIOS = [1.0, 0.5, 0.3]
HEURISTICS = ["dtr", "lru"]
# A client and server certificate as Python's ssl module verifies one (OpenSSL 3).
LEAF_EXTENSIONS = """\
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
"""


def openssl(*argv: str, cwd) -> None:
    subprocess.run(["openssl", *argv], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_authority(folder, name: str) -> None:
    """``name``.pem and ``name``.key: a self-signed certificate authority (P-256)."""
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip


def make_leaf(folder, authority: str, name: str) -> None:
    """``name``.pem and ``name``.key: a certificate for localhost signed by ``authority``."""
    (folder / "leaf.cnf").write_text(LEAF_EXTENSIONS)
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=localhost",
        cwd=folder,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{authority}.pem",
        "-CAkey", f"{authority}.key", "-CAcreateserial", "-out", f"{name}.pem",
        "-days", "2", "-extfile", "leaf.cnf",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """The cluster's authority (ca), one certificate for every member (node), and a
    stranger's authority (other)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    folder = tmp_path_factory.mktemp("certificates")
    make_authority(folder, "ca")
    make_leaf(folder, "ca", "node")
    make_authority(folder, "other")
    return folder


@pytest.fixture(scope="module")
def tls_cluster(certificates):
    """A LocalCluster that speaks only TLS: scheduler, worker and clients all present
    the node certificate, signed by the cluster's authority."""
    node, key = str(certificates / "node.pem"), str(certificates / "node.key")
    security = distributed.security.Security(
        tls_ca_file=str(certificates / "ca.pem"),
        **{f"tls_{role}_{part}": path for role in ("scheduler", "worker", "client")
           for part, path in (("cert", node), ("key", key))},
        require_encryption=True,
    )  # fmt: skip
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=security,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "chain.log"
    write_log(chain_trace(40), path)
    return path


def tls_options(certificates, authority: str = "ca") -> list[str]:
    return [
        "--tls-ca-file",
        str(certificates / f"{authority}.pem"),
        "--tls-cert",
        str(certificates / "node.pem"),
        "--tls-key",
        str(certificates / "node.key"),
    ]


def decided(results) -> list[tuple]:
    return sorted((r.heuristic, r.ratio, r.status, r.remats, r.evictions) for r in results)


def sweep_argv(trace_file, *more: str) -> list[str]:
    ratios = ",".join(str(r) for r in RATIOS)
    return [str(trace_file), "--ratios", ratios, "--heuristics", ",".join(HEURISTICS), *more]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_sweep_over_a_tls_cluster_decides_as_a_local_one(
    tls_cluster, certificates, trace_file, tmp_path
):
    address = tls_cluster.scheduler_address
    assert address.startswith("tls://")
    assert all(w.startswith("tls://") for w in tls_cluster.scheduler_info["workers"])
    out = tmp_path / "s.csv"
    argv = sweep_argv(trace_file, "--scheduler", address, *tls_options(certificates))
    assert main([*argv, "--csv", str(out)]) == 0
    local = sweep([chain_trace(40)], RATIOS, HEURISTICS, jobs=1)
    assert decided(read_csv(out)) == decided(local)


def test_the_tls_files_can_come_from_the_dask_config(tls_cluster, certificates, trace_file):
    import dask

    config = {
        "distributed.comm.tls.ca-file": str(certificates / "ca.pem"),
        "distributed.comm.tls.client.cert": str(certificates / "node.pem"),
        "distributed.comm.tls.client.key": str(certificates / "node.key"),
    }
    with dask.config.set(config):
        assert main(sweep_argv(trace_file, "--scheduler", tls_cluster.scheduler_address)) == 0


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], "needs the cluster's certificates: --tls-ca-file and --tls-cert"),
        (["--tls-ca-file", "ca.pem"], "needs both --tls-ca-file and --tls-cert"),
        (["--tls-ca-file", "nowhere.pem", "--tls-cert", "node.pem"], "nowhere.pem: no such file"),
    ],
)
def test_tls_options_are_checked_before_any_work(
    certificates, trace_file, capsys, monkeypatch, options, expected
):
    monkeypatch.chdir(certificates)
    code = main(sweep_argv(trace_file, "--scheduler", "tls://127.0.0.1:1", *options))
    assert code == 2
    assert expected in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--tls-cert", "c.pem"], "--tls-cert: only with --scheduler ADDRESS"),
        (["--worker-timeout", "5"], "--worker-timeout: only with --scheduler ADDRESS"),
        (
            ["--scheduler", "tcp://127.0.0.1:1", "--tls-ca-file", "ca.pem"],
            "--tls-ca-file: for a tls:// scheduler, not tcp://127.0.0.1:1",
        ),
        (["--scheduler", "tcp://127.0.0.1:1", "--jobs", "2"], "--jobs counts local processes"),
    ],
)
def test_cluster_options_that_would_be_ignored_are_refused(trace_file, capsys, options, expected):
    assert main(sweep_argv(trace_file, *options)) == 2
    assert expected in one_line(capsys.readouterr().err)


def test_a_stranger_certificate_authority_is_one_line(
    tls_cluster, certificates, trace_file, capsys
):
    """The scheduler's certificate is not signed by the authority given: refused."""
    address = tls_cluster.scheduler_address
    code = main(sweep_argv(trace_file, "--scheduler", address, *tls_options(certificates, "other")))
    assert code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"minidtr sim: cannot reach the Dask scheduler at {address}")


def test_a_scheduler_without_workers_is_one_line_after_the_timeout(trace_file, capsys):
    with distributed.LocalCluster(
        n_workers=0, dashboard_address=":0", silence_logs=logging.ERROR
    ) as empty:
        argv = sweep_argv(trace_file, "--scheduler", empty.scheduler_address)
        code = main([*argv, "--worker-timeout", "0.5"])
    assert code == 2
    assert one_line(capsys.readouterr().err) == (
        f"minidtr sim: the Dask scheduler at {empty.scheduler_address} has no worker after "
        f"0.5 s: start some (dask worker {empty.scheduler_address}), or wait longer with "
        "--worker-timeout"
    )


@pytest.fixture
def fake_server():
    """A TCP server on a free port that accepts and then stays silent, or sends
    ``banner`` first (as an SSH server does): not a Dask scheduler."""
    listeners = []

    def start(banner: bytes = b"") -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    peer, _ = listener.accept()
                    listeners.append(peer)
                    peer.sendall(banner)

        threading.Thread(target=accept, daemon=True).start()
        return f"tcp://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for sock in listeners:
        sock.close()


def test_a_server_that_never_answers_is_a_timeout_not_a_hang(fake_server):
    from minidtr.sim.parallel import connect

    address = fake_server()
    raised: list[BaseException] = []

    def attempt() -> None:
        try:
            connect(address, timeout=0.5)
        except BaseException as e:  # (checked below, in the test's thread)
            raised.append(e)

    # in a daemon thread: without the limit, connect hangs for ever (the test fails, not CI)
    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "connect to a silent server still waiting after 5 s"
    assert len(raised) == 1 and isinstance(raised[0], TimeoutError), raised
    assert "no Dask handshake within 0.5 s" in str(raised[0])


def test_a_server_that_speaks_first_is_one_line(fake_server, trace_file, capsys):
    address = fake_server(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
    assert main(sweep_argv(trace_file, "--scheduler", address)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"minidtr sim: cannot reach the Dask scheduler at {address}: it ")
    assert "does not speak Dask's protocol" in line


def test_required_encryption_with_a_tcp_address_is_one_line(trace_file, capsys):
    import dask

    with dask.config.set({"distributed.comm.require-encryption": True}):
        assert main(sweep_argv(trace_file, "--scheduler", "tcp://127.0.0.1:1")) == 2
    line = one_line(capsys.readouterr().err)
    assert "requires encryption (distributed.comm.require-encryption)" in line
    assert "use the scheduler's tls:// address, not tcp://127.0.0.1:1" in line


class LostClient:
    status = "closed"  # what Dask's client is once its reconnect gave up


def test_a_scheduler_lost_mid_sweep_is_one_line_naming_the_csv(
    trace_file, tmp_path, capsys, monkeypatch
):
    from minidtr.sim import cli, cluster_cli

    def sweep_then_lose(traces, args, client, thrash, on_row):
        on_row(object())
        raise OSError("Timed out trying to connect to tcp://127.0.0.1:1 after 10 s")

    @contextlib.contextmanager
    def lost_cluster(settings):
        yield from cluster_cli._lost_cluster_as_errors(LostClient(), settings.address)

    monkeypatch.setattr(cli, "cluster", lost_cluster)
    monkeypatch.setattr(cli, "_sweep", sweep_then_lose)
    out = tmp_path / "s.csv"
    argv = sweep_argv(trace_file, "--scheduler", "tcp://127.0.0.1:1", "--csv", str(out))
    assert main(argv) == 2
    assert one_line(capsys.readouterr().err) == (
        "minidtr sim: lost the Dask scheduler at tcp://127.0.0.1:1: Timed out trying to "
        f"connect to tcp://127.0.0.1:1 after 10 s; the 1 new replays finished are in {out}: "
        "rerun with --resume"
    )


def test_an_output_error_with_the_scheduler_there_is_not_a_lost_scheduler():
    from minidtr.sim.cluster_cli import _lost_cluster_as_errors

    class RunningClient:
        status = "running"

    body = _lost_cluster_as_errors(RunningClient(), "tcp://127.0.0.1:1")
    next(body)
    with pytest.raises(OSError, match="No space left"):
        body.throw(OSError(28, "No space left on device"))


def test_a_worker_without_minidtr_is_named(trace_file):
    from minidtr.sim import parallel

    class ClientOfWorkersWithoutMinidtr:
        def scatter(self, data, **_):
            raise Exception("ModuleNotFoundError(\"No module named 'minidtr'\")")

    with pytest.raises(parallel.WorkerImportError, match="a Dask worker cannot import minidtr"):
        list(parallel.run(len, [[1]], [(0, ())], client=ClientOfWorkersWithoutMinidtr()))
