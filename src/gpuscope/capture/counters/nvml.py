"""GPU counters over time through NVML (``--trace nvml``), sampled from the launcher.

For every GPU: utilization (the share of time a kernel ran), memory used, power, its limit and
whether the power cap holds the clocks down, SM and memory clocks, temperature and, where the driver gives them, PCIe throughput. Rows go to the report's
``host_counter`` table as ``gpuN.<counter>`` with ``pid = 0``. A failure (no driver, no
nvidia-ml-py) turns the sampler off with one line; the run goes on.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .periodic import PeriodicSampler, Row


POWER_CAP_REASONS = 0x4 | 0x80  # nvml.h's clock-event reasons: software power cap, hardware power brake


def _event_reasons(n: Any, handle: Any) -> int:
    """The reasons the GPU's clocks are held below their maximum now (a bit mask), under either of
    the names nvidia-ml-py has used."""
    read = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


class NvmlSampler(PeriodicSampler):
    """Samples NVML counters of every GPU until stopped."""

    name = "nvml"

    def __init__(self, interval_s: float, diag: Callable[[str], None], nvml: Any = None) -> None:
        super().__init__(interval_s, diag)
        self._nvml = nvml
        self._handles: list[Any] = []
        self._failed: set[str] = set()

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
        return super().start()

    def stop(self) -> None:
        super().stop()
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001,S110  (shutting down; nothing to report to)
            pass

    def sample(self) -> list[Row]:
        """Read every counter of every GPU once; a counter that fails is not asked again."""
        n, failed = self._nvml, self._failed
        now = time.monotonic_ns()
        readers: dict[str, Callable[[Any], float]] = {
            "util_percent": lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu,
            "memory_util_percent": lambda h: n.nvmlDeviceGetUtilizationRates(h).memory,
            "memory_used_bytes": lambda h: n.nvmlDeviceGetMemoryInfo(h).used,
            "power_watts": lambda h: n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "sm_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "memory_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "power_limit_watts": lambda h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "power_capped": lambda h: float(bool(_event_reasons(n, h) & POWER_CAP_REASONS)),
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
