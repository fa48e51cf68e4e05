"""A compile in a thread of its own, beside the training loop: started at once or later, waited for
where its program is first needed, its error raised there (`Run.start_compiling_evaluation`).

XLA compiles without holding the GIL, so the loop's thread goes on while it runs.
"""

from __future__ import annotations

import threading
from typing import Callable


class CompileThread:
    """`compile_fn()` in a daemon thread named `name`; nothing runs until `start` (or `wait`)."""

    def __init__(self, compile_fn: Callable[[], None], name: str):
        self._errors: list[BaseException] = []

        def run() -> None:
            try:
                compile_fn()
            except BaseException as error:  # raised again in the waiting thread, by `wait`
                self._errors.append(error)

        self._thread = threading.Thread(target=run, name=name, daemon=True)

    def start(self) -> None:
        """Start the compile; a no-op once started."""
        if self._thread.ident is None:
            self._thread.start()

    def wait(self) -> None:
        """Start the compile if it has not begun, wait for its end, and raise its error, if any."""
        self.start()
        self._thread.join()
        if self._errors:
            raise self._errors[0]

    def close(self) -> None:
        """Wait for a started compile to end (its error dropped: the caller is already failing)."""
        if self._thread.ident is not None:
            self._thread.join()
