"""A loopback TCP proxy that can lose one reply: the server runs the command, the client
sees its connection drop (what a network failure after execution looks like)."""

from __future__ import annotations

import contextlib
import socket
import threading


class LossyProxy:
    """Forwards 127.0.0.1:<port> to a server; after ``arm()`` the next chunk the server
    sends is dropped and both connections are closed."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.armed.set()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_server and self.armed.is_set():
                    self.armed.clear()
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()
