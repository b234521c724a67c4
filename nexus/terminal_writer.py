"""The terminal's writer thread survives a failed write.

Textual's ``WriterThread`` ends at the first write that raises (a closed terminal
answers EIO). Its queue holds 30 writes, so the app's next 30 writes fill it and the 31st
blocks the event loop for good: measured, a terminal closed at Nexus's first screen left
the process running with its session locked. This writer drops what cannot be written
and keeps emptying its queue, so the app can still store, close and exit.
"""

from __future__ import annotations


def install() -> bool:
    """Use the sturdy writer in the Linux/macOS driver. True when installed; Textual's own
    is left where its names have moved."""
    try:
        from textual.drivers import linux_driver
        from textual.drivers._writer_thread import WriterThread
    except ImportError:
        return False
    current = getattr(linux_driver, "WriterThread", None)
    if current is not WriterThread:  # installed already, or Textual's names have moved
        return bool(getattr(current, "sturdy", False))
    if not all(hasattr(WriterThread, a) for a in ("run", "stop")):
        return False

    class SturdyWriterThread(WriterThread):
        sturdy = True
        failed: BaseException | None = None  # the first write that failed

        def run(self) -> None:
            get, qsize = self._queue.get, self._queue.qsize
            while (text := get()) is not None:
                self._write(text, flush=qsize() == 0)
            self._write("", flush=True)

        def _write(self, text: str, flush: bool) -> None:
            try:
                if text:
                    self._file.write(text)
                if flush:
                    self._file.flush()
            except (OSError, ValueError, UnicodeError) as exc:  # the terminal is gone: nothing to show it on
                if self.failed is None:
                    self.failed = exc

    linux_driver.WriterThread = SturdyWriterThread
    return True
