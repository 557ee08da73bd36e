"""A hostile upstream for tests and bench/bench_hardening.py: answers every request with a 200 and
then trickles its body one byte every `interval` seconds (`mode="trickle"`), or streams an endless
body as fast as it can (`mode="flood"`), on 127.0.0.1."""

from __future__ import annotations

import socket
import threading


class TrickleServer:
    def __init__(self, interval: float = 2.0, mode: str = "trickle"):
        self.interval, self.mode = interval, mode
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if self.mode == "flood":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
                    block = b"x" * 65536
                    while not self._stop.is_set():
                        conn.sendall(block)
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                    while not self._stop.wait(self.interval):
                        conn.sendall(b" ")
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
