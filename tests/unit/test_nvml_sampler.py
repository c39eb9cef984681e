"""The NVML sampler against a stand-in for pynvml (no GPU here), and its failure path."""

from __future__ import annotations

import types

from gpuscope.capture.counters.nvml import NvmlSampler


def _fake_nvml(fail_power: bool = False) -> types.SimpleNamespace:
    def power(h):
        if fail_power:
            raise RuntimeError("NVMLError_NotSupported")
        return 250_000  # milliwatts

    return types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=3_000_000_000),
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetClockInfo=lambda h, which: {1: 1980, 2: 3201}[which],
        nvmlDeviceGetTemperature=lambda h, which: 45,
        nvmlDeviceGetPcieThroughput=lambda h, which: [100, 200][which],
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        # gpu0 held by the software power cap (0x4) and idle (0x1); gpu1 by a thermal slowdown only (0x20)
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: {"gpu0": 0x5, "gpu1": 0x20}[h],
    )  # fmt: skip


def test_counters_of_every_gpu() -> None:
    s = NvmlSampler(0.05, lambda m: None, nvml=_fake_nvml())
    assert s.start()
    s.stop()
    rows = {name: value for _, pid, name, value in s.sample()}
    assert rows["gpu0.util_percent"] == 87 and rows["gpu1.sm_clock_mhz"] == 1980
    assert rows["gpu0.power_watts"] == 250.0 and rows["gpu0.memory_used_bytes"] == 3e9
    assert rows["gpu1.pcie_rx_bytes_per_s"] == 200 * 1024
    assert rows["gpu0.power_limit_watts"] == 700.0
    assert rows["gpu0.power_capped"] == 1.0 and rows["gpu1.power_capped"] == 0.0
    assert len(rows) == 2 * 11


def test_older_nvml_names_the_reasons_throttle_reasons() -> None:
    fake = _fake_nvml()
    del fake.nvmlDeviceGetCurrentClocksEventReasons
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x80  # the hardware power brake
    s = NvmlSampler(0.05, lambda m: None, nvml=fake)
    assert s.start()
    s.stop()
    rows = {name: value for _, pid, name, value in s.sample()}
    assert rows["gpu0.power_capped"] == 1.0 and rows["gpu1.power_capped"] == 1.0


def test_an_unsupported_counter_is_dropped_not_fatal() -> None:
    s = NvmlSampler(0.05, lambda m: None, nvml=_fake_nvml(fail_power=True))
    assert s.start()
    s.stop()
    names = {name for _, _, name, _ in s.sample()}
    assert "gpu0.power_watts" not in names and "gpu0.power_watts" in s._failed
    assert "gpu0.util_percent" in names


def test_no_driver_turns_it_off_with_one_line() -> None:
    said: list[str] = []

    def init() -> None:
        raise OSError("NVML Shared Library Not Found")

    fake = types.SimpleNamespace(nvmlInit=init)
    assert not NvmlSampler(0.05, said.append, nvml=fake).start()
    assert said == ["GPU counters (NVML) are off: OSError: NVML Shared Library Not Found"]
