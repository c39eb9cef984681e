"""The roofs of a roofline: peak FLOP/s per precision and memory bandwidths of one device.

Where they come from, best first: a calibration of that device model measured on this machine
(``gpuscope roofline --calibrate``, cached as JSON per device name under
``$GPUSCOPE_CACHE_DIR/ceilings/``, default ``~/.cache/gpuscope``), the vendor datasheet
(:mod:`.datasheet`), or the report's device record (DRAM bandwidth only). A measured ceiling that
a calibration could not take (FP8 on a GPU without it) is filled from the datasheet, and each
ceiling says where it came from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...errors import GpuscopeError
from ...trace.report import Report
from .datasheet import datasheet
from ..table import Column, Table

# Keys of Ceilings.flops: CUDA-core peaks, then tensor-core peaks per input precision
FLOP_KEYS = ("fp64", "fp32", "tensor_fp64", "tensor_tf32", "tensor_bf16", "tensor_fp16", "tensor_fp8")
LABELS = {
    "fp64": "FP64", "fp32": "FP32", "tensor_fp64": "FP64 tensor", "tensor_tf32": "TF32 tensor",
    "tensor_bf16": "BF16 tensor", "tensor_fp16": "FP16 tensor", "tensor_fp8": "FP8 tensor",
    "dram": "DRAM", "l2": "L2",
}  # fmt: skip
UNSTABLE_SPREAD = 0.10  # a calibration's repeats spread more than this: the machine was not steady


@dataclass
class Ceilings:
    """Peaks of one device: ``flops`` in FLOP/s by key (FLOP_KEYS), bandwidths in bytes/s, and
    for each ceiling where it came from (``measured``, ``datasheet`` or ``device``)."""

    device: str
    dram_bytes_per_s: float | None = None
    l2_bytes_per_s: float | None = None
    flops: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    measured_at: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def peak(self, precision: str | None, tensor: bool) -> float | None:
        """Return the FLOP/s roof for work of ``precision`` on tensor cores or CUDA cores.

        CUDA-core work of every precision but FP64 has the FP32 roof (half-precision elementwise
        work runs at about the FP32 rate).
        """
        if precision is None:
            return None
        if tensor:
            return self.flops.get(f"tensor_{precision}")
        return self.flops.get("fp64" if precision == "fp64" else "fp32")

    def unstable(self) -> dict[str, float]:
        """Return the measured ceilings whose repeats spread (``(max - min) / median``) by more than
        UNSTABLE_SPREAD, with their spread; empty for other ceilings."""
        spread = self.details.get("spread") or {}
        return {k: float(v) for k, v in spread.items() if float(v) > UNSTABLE_SPREAD}

    @property
    def source(self) -> str:
        """Return the sources of the ceilings in words: ``measured``, ``datasheet``, ``measured and
        datasheet`` ..."""
        kinds = sorted(set(self.sources.values()), key=["measured", "datasheet", "device"].index)
        return " and ".join(kinds) if kinds else "none"

    def rows(self) -> list[tuple[str, float, str]]:
        """Return every ceiling as (key, value, source): bandwidths first, then FLOP/s."""
        out = [(k, v, self.sources.get(k, "")) for k, v in
               (("dram", self.dram_bytes_per_s), ("l2", self.l2_bytes_per_s)) if v]
        return out + [(k, self.flops[k], self.sources.get(k, "")) for k in FLOP_KEYS if k in self.flops]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Ceilings:
        doc = json.loads(text)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


def cache_dir() -> Path:
    """Return the directory of cached calibrations: ``$GPUSCOPE_CACHE_DIR/ceilings``, else
    ``$XDG_CACHE_HOME/gpuscope/ceilings``, else ``~/.cache/gpuscope/ceilings``."""
    base = os.environ.get("GPUSCOPE_CACHE_DIR")
    if base:
        return Path(base) / "ceilings"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gpuscope" / "ceilings"


MAX_SLUG = 100  # characters of a device's name kept in its file's name (file names end at 255 bytes)


def cache_path(device: str) -> Path:
    """Return the file that holds the calibration of the device named ``device``: the name with
    other characters than letters, digits, ``.``, ``_`` and ``-`` as ``-``; a longer name than
    MAX_SLUG is cut and followed by a hash of the whole name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", device).strip("-") or "device"
    if len(slug) > MAX_SLUG:
        slug = slug[:MAX_SLUG] + "-" + hashlib.sha256(device.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return cache_dir() / f"{slug}.json"


def load_cached(device: str) -> Ceilings | None:
    """Return the cached calibration of ``device``, or None when there is none (or it is unreadable)."""
    path = cache_path(device)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a symbolic link there is not ours
        with os.fdopen(fd, encoding="utf-8") as fh:
            return Ceilings.from_json(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise GpuscopeError(f"cannot read the cached ceilings {path} ({exc}); delete it or run "
                            "gpuscope roofline --calibrate again") from None


def save(ceilings: Ceilings) -> Path:
    """Write a calibration to the cache; return its path."""
    path = cache_path(ceilings.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a new file of our own (O_EXCL: never a name planted there, a symbolic link included), renamed
    # over the entry (which replaces a link, never writes through it)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:40]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(ceilings.to_json())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def from_datasheet(device: str) -> Ceilings | None:
    """Return the datasheet ceilings of ``device``, or None for a GPU not in the table."""
    sheet = datasheet(device)
    if sheet is None:
        return None
    c = Ceilings(device, dram_bytes_per_s=sheet.dram_bytes_per_s, flops=dict(sheet.flops))
    c.sources = {k: "datasheet" for k in ("dram", *sheet.flops)}
    c.details["datasheet_model"] = sheet.model
    return c


def for_device(device: str, dram_bytes_per_s: float | None = None) -> Ceilings:
    """Return the best ceilings known for ``device``: measured, filled in from the datasheet, with
    ``dram_bytes_per_s`` (the device record's bandwidth) as the last resort for DRAM."""
    measured = load_cached(device)
    sheet = from_datasheet(device)
    out = measured or sheet or Ceilings(device)
    if measured is not None and sheet is not None:
        for key, value in sheet.flops.items():
            if key not in out.flops:
                out.flops[key] = value
                out.sources[key] = "datasheet"
        if not out.dram_bytes_per_s:
            out.dram_bytes_per_s, out.sources["dram"] = sheet.dram_bytes_per_s, "datasheet"
    if not out.dram_bytes_per_s and dram_bytes_per_s:
        out.dram_bytes_per_s, out.sources["dram"] = dram_bytes_per_s, "device"
    return out


OWN_CONNECTION_KERNELS = 1_000_000  # from this many kernels the device query reads on a connection of its own


def report_device(report: Report) -> tuple[str, float | None] | None:
    """Return the name and DRAM bandwidth (bytes/s, from CUPTI's device record) of the GPU that ran
    the most kernel time in ``report``; None when the report has no GPU."""
    query = """SELECT d.name, any_value(d.memory_bandwidth_kbps), sum(k.end_ns - k.start_ns) AS t
               FROM device d LEFT JOIN kernel k ON k.pid = d.pid AND k.device_id = d.id
               GROUP BY d.name ORDER BY t DESC NULLS LAST, d.name LIMIT 1"""
    if report.count("kernel") < OWN_CONNECTION_KERNELS:
        rows = report.sql(query)
    else:  # every kernel's blocks read on a connection closed after, not kept in the report's cache
        from ..ops.own_connection import own_connection

        with own_connection(report) as own:
            rows = own.sql(query)
    if not rows:
        return None
    name, kbps, _ = rows[0]
    return str(name), (float(kbps) * 1000.0 if kbps else None)


UNNAMED_GPU = "the GPU, not named in the report (its trace has no device properties)"


def cpu_name() -> str:
    """Return this machine's CPU model (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return "CPU " + (platform.processor() or platform.machine() or "unknown")


def for_report(report: Report) -> Ceilings:
    """Return the ceilings for ``report``'s GPU (see :func:`for_device`), or for this machine's CPU
    (its cached calibration) when the report has no GPU."""
    found = report_device(report)
    if found is None:
        if report.count("kernel"):  # GPU work of an unnamed GPU (an imported trace without device properties)
            return Ceilings(UNNAMED_GPU)
        return for_device(cpu_name())
    return for_device(*found)


def ceilings_table(ceilings: Ceilings) -> Table:
    """The ceilings of a device (in T or G units), beside its datasheet's where there is one."""
    sheet = from_datasheet(ceilings.device)
    theirs = {k: v for k, v, _ in sheet.rows()} if sheet else {}
    rows = []
    for key, value, source in ceilings.rows():
        scale, prefix = (1e12, "T") if value >= 1e12 else (1e9, "G")  # a CPU's are in G
        unit = prefix + ("B/s" if key in ("dram", "l2") else "FLOP/s")
        ref = theirs.get(key)
        rows.append((LABELS.get(key, key), value / scale, unit, source, ref / scale if ref else None,
                     100.0 * value / ref if ref and source != "datasheet" else None))
    cols = [Column("Ceiling"), Column("Value", "number"), Column("Unit"), Column("Source"),
            Column("Datasheet", "number"), Column("Of Datasheet", "percent")]
    notes = []
    if sheet:
        notes.append(f"Datasheet: NVIDIA {sheet.details['datasheet_model']}, dense (no sparsity), boost clock.")
    skipped = ceilings.details.get("skipped") or {}
    notes += [f"{LABELS.get(k, k)} not measured: {why}" for k, why in skipped.items()]
    if ceilings.measured_at:
        notes.append(f"Measured {ceilings.measured_at}; cached in {cache_path(ceilings.device)}.")
    shaky = ceilings.unstable()
    if shaky:
        notes.append("Unstable when measured (repeats spread by " + ", ".join(
            f"{LABELS.get(k, k)} {100 * v:.0f}%" for k, v in shaky.items()) + "): these roofs may be low.")
    return Table("ceilings", f"Ceilings of {ceilings.device}", cols, rows, notes)
