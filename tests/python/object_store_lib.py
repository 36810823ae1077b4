"""An S3-compatible store on loopback for the object-storage tests and benchmarks: ``moto``'s
server mode, and a TCP proxy in front of it that can add latency to every request or refuse
connections (the store "down") while the store keeps its objects."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time
from typing import Callable
from pathlib import Path

import boto3
import requests

from quiver_testlib import free_ports, stop_process

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "quiver-test",
    "AWS_SECRET_ACCESS_KEY": "quiver-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


# The fleet the object-storage and distributed tests write: 12 hosts in 3 regions, readings
# every 10 minutes for three days (three partitions) from 2024-03-01T00:00:00Z.
HOSTS = [f"h{i:02d}" for i in range(12)]
START_NS = 1_709_251_200 * 10**9
STEP_NS = 600 * 10**9
POINTS = 432


def cpu_lines(points: range, value: Callable[[str, int], float]) -> str:
    return "\n".join(
        f"cpu,host={host},region=r{int(host[1:]) % 3} usage={value(host, i)} "
        f"{START_NS + i * STEP_NS}"
        for i in points for host in HOSTS)


def mem_lines(points: range) -> str:
    return "\n".join(
        f"mem,host={host},region=r{int(host[1:]) % 3} free={i * 7 + int(host[1:])}i "
        f"{START_NS + i * STEP_NS}"
        for i in points for host in HOSTS)


def usage(host: str, i: int) -> float:
    """The cpu reading of `host` at step `i`."""
    return (i * 13 + int(host[1:])) % 97 / 1.5


class MotoServer:
    """``moto_server`` on a free loopback port, started with the test's virtualenv."""

    def __init__(self, log_path: Path):
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        moto = Path(sys.executable).parent / "moto_server"
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(self.endpoint, timeout=1)
                return
            except requests.RequestException:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto_server exited: {log_path.read_text()}")
                time.sleep(0.1)
        raise RuntimeError("moto_server did not answer within 30 s")

    def client(self):
        """A boto3 S3 client of this server (the tests' way to look at and damage objects)."""
        return boto3.client("s3", endpoint_url=self.endpoint,
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                            region_name=CREDENTIALS["AWS_REGION"])

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def quiver_environment(endpoint: str) -> dict[str, str]:
    """The environment a Quiver node reads the store's endpoint and credentials from."""
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


class Proxy:
    """A TCP proxy on a free loopback port to ``target_port``: ``delay_s`` is added before
    each chunk a client sends is forwarded (one S3 request is one chunk or a few, so about
    one delay per request), and while ``down`` new connections are refused and open ones
    cut (an unreachable store)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.delay_s = 0.0
        self.requests = 0
        # bytes the store sent back (object bodies, listings) through the proxy
        self.bytes_from_store = 0
        self._down = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def down(self) -> bool:
        return self._down.is_set()

    @down.setter
    def down(self, value: bool) -> None:
        if value:
            self._down.set()
            with self._lock:
                for sock in list(self._open):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        else:
            self._down.clear()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, upstream))
        try:
            while not self.down:
                readable, _, _ = select.select([client, upstream], [], [], 0.5)
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if sock is client:
                        self.requests += 1
                        if self.delay_s:
                            time.sleep(self.delay_s)
                        upstream.sendall(data)
                    else:
                        self.bytes_from_store += len(data)
                        client.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(client)
                self._open.discard(upstream)
            client.close()
            upstream.close()

    def stop(self) -> None:
        self._stopped = True
        self.down = True
        self._listener.close()
