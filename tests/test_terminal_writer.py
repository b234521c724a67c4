"""The terminal writer keeps going when the terminal is gone (writes raise EIO): the
app's writes never block on a full queue, and stop() returns."""

from __future__ import annotations

import errno
import threading

from nexus import terminal_writer


class ClosedTerminal:
    def __init__(self) -> None:
        self.tried = 0

    def write(self, text: str) -> int:
        self.tried += 1
        raise OSError(errno.EIO, "Input/output error")

    def flush(self) -> None:
        raise OSError(errno.EIO, "Input/output error")

    def fileno(self) -> int:
        return 1


def test_writes_after_the_terminal_closed_neither_kill_the_writer_nor_block_the_app():
    assert terminal_writer.install()
    from textual.drivers import linux_driver

    terminal = ClosedTerminal()
    writer = linux_driver.WriterThread(terminal)
    writer.start()
    app = threading.Thread(target=lambda: [writer.write(f"frame {i}") for i in range(200)] and writer.stop(),
                           daemon=True)
    app.start()
    app.join(10)  # Textual's own writer died at the first write: the 31st blocked for ever
    assert not app.is_alive(), "the app's writes blocked"
    assert not writer.is_alive()
    assert terminal.tried == 200
    assert isinstance(writer.failed, OSError)


def test_installing_twice_keeps_one_sturdy_writer():
    from textual.drivers import linux_driver

    assert terminal_writer.install() and terminal_writer.install()
    assert linux_driver.WriterThread.sturdy
    assert linux_driver.WriterThread.__mro__[1].__name__ == "WriterThread"
