"""``--ray-address`` is checked before anything starts (``dpaudit.fleet.fleet.check_ray_address``, shared by
``attack``, ``audit-trainer`` and ``run_fleet``): a malformed address, a ``ray://`` address without the Ray Client,
a port where nothing listens and a port where something that is not Ray listens are each one line, exit code 2,
nothing written, in seconds. (They were Ray's tracebacks, ``ValueError: Invalid address format`` and ``Ray Client
requires pip package ray[client]``, and minutes of retries.) No Ray cluster is started: a tiny socket server plays
a gRPC server's part of the handshake for the accepted case.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.fleet import fleet

pytest.importorskip("ray")  # the fleet extra: without it the option is refused for that reason (test_installs)


def _free_port() -> int:
    """A port where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _commands(tmp_path: Path, address: str) -> dict[str, list[str]]:
    return {
        "audit-trainer": [
            "audit-trainer",
            "--trainer",
            "edp-sgd",
            "--out",
            str(tmp_path / "audit"),
            "--canaries",
            "2",
            "--ray-address",
            address,
        ],
        "attack": [
            "attack",
            "--model",
            str(tmp_path / "model"),
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "attack"),
            "--attacks",
            "shadow",
            "--ray-address",
            address,
        ],
    }


@pytest.mark.parametrize("command", ["audit-trainer", "attack"])
@pytest.mark.parametrize(
    ("address", "needles"),
    [
        ("garbage", ["--ray-address 'garbage' is not a Ray cluster address", "HOST:PORT", "ray://HOST:PORT"]),
        ("http://head:8265", ["http:// is not a Ray cluster address"]),
        ("head:99999", ["not a Ray cluster address"]),
        ("", ["--ray-address is empty"]),
    ],
    ids=["garbage", "http", "port-range", "empty"],
)
def test_malformed_address_is_one_line_before_anything(tmp_path, command, address, needles):
    _one_line(CliRunner().invoke(cli, _commands(tmp_path, address)[command]), *needles)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["audit-trainer", "attack"])
def test_ray_client_address_without_the_client_names_the_package(tmp_path, command, monkeypatch):
    import dpaudit.common.extras

    real = dpaudit.common.extras.installed
    monkeypatch.setattr(dpaudit.common.extras, "installed", lambda module: module != "grpc" and real(module))
    line = _one_line(
        CliRunner().invoke(cli, _commands(tmp_path, "ray://127.0.0.1:10001")[command]),
        "ray://127.0.0.1:10001",
        "Ray Client",
        "pip install 'ray[client]'",
    )
    assert "Traceback" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["audit-trainer", "attack"])
def test_nothing_listening_fails_in_seconds(tmp_path, command):
    """A subprocess with a deadline: before the check, Ray retried for minutes (the test would time out)."""
    port = _free_port()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dpaudit", *_commands(tmp_path, f"127.0.0.1:{port}")[command]],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert time.monotonic() - started < 30
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [
        f"Error: --ray-address 127.0.0.1:{port}: nothing accepts connections at 127.0.0.1:{port} "
        f"(Connection refused); start the cluster there (ray start --head --port={port}) or correct the "
        "address."
    ], lines
    assert list(tmp_path.iterdir()) == []


class _Server:
    """A one-connection-at-a-time TCP server on localhost that sends ``reply`` after reading the client's preface
    (None: reads and never answers)."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                while len(self.received) < len(fleet._HTTP2_PREFACE):
                    chunk = conn.recv(64)
                    if not chunk:
                        break
                    self.received += chunk
                if self.reply is not None:
                    conn.sendall(self.reply)
                    time.sleep(0.2)
                else:
                    time.sleep(5)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def test_a_grpc_server_is_accepted():
    """The HTTP/2 handshake a gRPC server (Ray's GCS) answers: a SETTINGS frame. The address is returned as given."""
    server = _Server(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    try:
        assert fleet.check_ray_address(f" 127.0.0.1:{server.port} ", timeout_s=5) == f"127.0.0.1:{server.port}"
        assert server.received.startswith(b"PRI * HTTP/2.0")
    finally:
        server.close()


def test_a_port_that_is_not_ray_is_named():
    server = _Server(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        with pytest.raises(UserInputError, match="accepts connections but does not answer as a Ray cluster"):
            fleet.check_ray_address(f"127.0.0.1:{server.port}", timeout_s=5)
    finally:
        server.close()


def test_a_silent_port_times_out_with_the_timeout_named(monkeypatch):
    server = _Server(None)
    monkeypatch.setenv("DPAUDIT_RAY_CONNECT_TIMEOUT_S", "0.5")
    started = time.monotonic()
    try:
        with pytest.raises(UserInputError, match=r"no answer from 127\.0\.0\.1:\d+ within 0\.5 s"):
            fleet.check_ray_address(f"127.0.0.1:{server.port}")
    finally:
        server.close()
    assert time.monotonic() - started < 5


def test_run_fleet_checks_the_address_before_any_job(tmp_path):
    job = fleet.FleetJob(
        trainer="edp-sgd", config={}, data_dir=tmp_path / "data", out_dir=tmp_path / "run", seed=0, label="job 1/1"
    )
    with pytest.raises(UserInputError, match="is not a Ray cluster address"):
        fleet.run_fleet([job], ray_address="garbage", progress=False)
    assert list(tmp_path.iterdir()) == []
