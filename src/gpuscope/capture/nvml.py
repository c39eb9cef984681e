"""GPU counters over time through NVML (``--trace nvml``), sampled from the launcher.

For every GPU: utilization (the share of time a kernel ran), memory used, power, SM and memory
clocks, temperature and, where the driver gives them, PCIe throughput. Rows go to the report's
``host_counter`` table as ``gpuN.<counter>`` with ``pid = 0``. A failure (no driver, no
nvidia-ml-py) turns the sampler off with one line; the run goes on.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

Row = tuple[int, int, str, float]


class NvmlSampler:
    """A thread that samples NVML counters of every GPU until stopped."""

    def __init__(self, interval_s: float, diag: Callable[[str], None], nvml: Any = None) -> None:
        self.interval = interval_s
        self.diag = diag
        self._nvml = nvml
        self.rows: list[Row] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []

    def start(self) -> bool:
        """Initialize NVML and start sampling; return False (after saying why) if it cannot."""
        try:
            if self._nvml is None:
                import pynvml  # noqa: PLC0415  (nvidia-ml-py, in the cuda extra)

                self._nvml = pynvml
            self._nvml.nvmlInit()
            count = self._nvml.nvmlDeviceGetCount()
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # noqa: BLE001  (ImportError or NVMLError_*)
            self.diag(f"GPU counters (NVML) are off: {type(exc).__name__}: {str(exc) or 'no detail'}")
            return False
        self._thread = threading.Thread(target=self._run, name="gpuscope-nvml", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001,S110  (shutting down; nothing to report to)
                pass

    def take(self) -> list[Row]:
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def _run(self) -> None:
        failed: set[str] = set()
        while not self._stop.wait(self.interval):
            rows = self.sample(failed)
            with self._lock:
                self.rows += rows

    def sample(self, failed: set[str]) -> list[Row]:
        """Read every counter of every GPU once; a counter that fails is not asked again."""
        n = self._nvml
        now = time.monotonic_ns()
        readers: dict[str, Callable[[Any], float]] = {
            "util_percent": lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu,
            "memory_util_percent": lambda h: n.nvmlDeviceGetUtilizationRates(h).memory,
            "memory_used_bytes": lambda h: n.nvmlDeviceGetMemoryInfo(h).used,
            "power_watts": lambda h: n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "sm_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "memory_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "temperature_c": lambda h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "pcie_tx_bytes_per_s": lambda h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) * 1024.0,
            "pcie_rx_bytes_per_s": lambda h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES) * 1024.0,
        }
        rows: list[Row] = []
        for i, handle in enumerate(self._handles):
            for name, read in readers.items():
                key = f"gpu{i}.{name}"
                if key in failed:
                    continue
                try:
                    rows.append((now, 0, key, float(read(handle))))
                except Exception:  # noqa: BLE001  (not supported on this GPU or driver)
                    failed.add(key)
        return rows
