"""Whether the launcher that reads a profiled process's spool is still alive: a process whose
launcher died (killed with the terminal) stops collecting instead of filling its spool for no one."""

from __future__ import annotations

import os

LAUNCHER_ENV = "GPUSCOPE_LAUNCHER"  # the pid of the launcher that reads the spool


class Launcher:
    """Tells whether the launcher that reads this process's spool is still alive (by a pidfd where
    the kernel has them, so a reused pid is not mistaken for it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    @classmethod
    def from_env(cls) -> Launcher | None:
        value = os.environ.get(LAUNCHER_ENV, "")
        return cls(int(value)) if value.isdigit() else None

    def gone(self) -> bool:
        """Return whether the launcher has ended."""
        if self.fd is not None:
            import select  # noqa: PLC0415

            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            return bool(poller.poll(0))
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
