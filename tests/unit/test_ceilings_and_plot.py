"""Calibration on the CPU (tiny sizes), the ceilings cache, and the roofline chart (PNG, SVG, HTML)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
from roofline_builder import CEILINGS, install_torch_ops_contract, roofline_report

from gpuscope.analysis.roofline.ceilings import Ceilings, cache_path, for_device, load_cached, save
from gpuscope.analysis.roofline.points import kernel_points, layer_points
from gpuscope.errors import GpuscopeError
from gpuscope.run.roof_benchmark import Sizes, calibrate
from gpuscope.reporters import roofline_plot

pytest.importorskip("matplotlib")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def points(tmp_path: Path, cache: Path) -> Iterator[pd.DataFrame]:
    install_torch_ops_contract()
    with roofline_report(tmp_path / "roof.gpuscope") as r:
        yield kernel_points(r)


def test_cpu_calibration_measures_bandwidth_and_gemm_peaks(cache: Path) -> None:
    t0 = time.monotonic()
    c = calibrate("cpu", Sizes.tiny())
    assert time.monotonic() - t0 < 5
    assert c.device.startswith("CPU ")
    assert c.dram_bytes_per_s and c.dram_bytes_per_s > 1e6
    assert c.flops["fp32"] > 1e6 and c.flops["fp64"] > 1e6
    assert c.sources == {"dram": "measured", "fp32": "measured", "fp64": "measured"}
    assert c.measured_at and c.details["kind"] == "cpu"
    path = save(c)
    assert path == cache_path(c.device) and path.parent == cache / "ceilings"
    again = load_cached(c.device)
    assert again == c
    assert for_device(c.device).flops == c.flops  # no datasheet for a CPU: measured only


def test_gpu_calibration_without_a_gpu_says_so() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(GpuscopeError, match="no GPU"):
        calibrate("cuda", Sizes.tiny())
    with pytest.raises(GpuscopeError, match="unknown device"):
        calibrate("tpu", Sizes.tiny())


def test_cache_names_are_file_safe(cache: Path) -> None:
    assert cache_path("NVIDIA A100-SXM4-80GB").name == "NVIDIA-A100-SXM4-80GB.json"
    assert cache_path("CPU Intel(R) Xeon(R) @ 2.20GHz").name == "CPU-Intel-R-Xeon-R-2.20GHz.json"


def test_a_link_planted_in_the_cache_is_replaced_never_written_through(cache: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    c = Ceilings("NVIDIA H100 80GB HBM3", dram_bytes_per_s=3e12)
    entry = cache_path(c.device)
    entry.parent.mkdir(parents=True)
    for name in (entry.with_suffix(".tmp"), entry.parent / f".{entry.stem}.tmp"):
        name.symlink_to(victim)  # where a writer might put its temporary file
    entry.symlink_to(victim)
    with pytest.raises(GpuscopeError):  # the entry is a link: not read through
        load_cached(c.device)
    assert save(c) == entry
    assert victim.read_text() == "keep me\n"
    assert not entry.is_symlink() and load_cached(c.device) == c
    assert sorted(p.name for p in entry.parent.iterdir() if not p.is_symlink()) == [entry.name]


def test_a_very_long_device_name_has_a_cache_entry(cache: Path) -> None:
    names = ["G" * 300, "G" * 300 + "x", "é" * 200]
    for name in names:
        c = Ceilings(name, dram_bytes_per_s=1e12)
        path = save(c)
        assert len(path.name.encode()) <= 255 and load_cached(name) == c
    assert len({cache_path(n) for n in names}) == len(names)


def test_chart_has_log_axes_labelled_ceilings_and_one_point_per_kernel(points: pd.DataFrame) -> None:
    fig = roofline_plot.figure(points, CEILINGS, "Roofline")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    gids = {line.get_gid() for line in ax.get_lines()}
    assert gids == {"ceiling-dram", "ceiling-l2", "ceiling-fp32", "ceiling-tensor_bf16", "ceiling-tensor_tf32"}
    labels = [t.get_text() for t in ax.texts]
    assert "DRAM 1 TB/s" in labels and "BF16 tensor 100 TFLOP/s" in labels and "FP32 10 TFLOP/s" in labels
    placed = {c.get_gid(): len(c.get_offsets()) for c in ax.collections}
    # 5 points with FLOPs (two adds: one per layer): 2 compute, 2 memory, 1 latency
    assert placed == {"points-compute": 2, "points-memory": 2, "points-latency": 1}
    dram = next(line for line in ax.get_lines() if line.get_gid() == "ceiling-dram")
    (x0, x1), (y0, y1) = dram.get_data()
    assert y0 / x0 == pytest.approx(1e12) and y1 == pytest.approx(1e14)  # slope = bandwidth, up to the top roof
    compute = next(c for c in ax.collections if c.get_gid() == "points-compute")
    xy = compute.get_offsets().tolist()
    assert any(x == pytest.approx(2e9 / 6e6) and y == pytest.approx(5e13) for x, y in xy)  # the bf16 GEMM
    assert "2 without work or FLOPs not shown" in [t.get_text() for t in fig.texts]


def test_svg_png_and_html_outputs(points: pd.DataFrame, tmp_path: Path) -> None:
    roofline_plot.write(points, CEILINGS, tmp_path / "r.svg", "Roofline")
    svg = (tmp_path / "r.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and 'id="ceiling-dram"' in svg and 'id="points-memory"' in svg
    roofline_plot.write(points, CEILINGS, tmp_path / "r.png", "Roofline")
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    roofline_plot.write(points, CEILINGS, tmp_path / "r.html", "Roofline <test>")
    page = (tmp_path / "r.html").read_text()
    assert "<svg" in page and "Roofline &lt;test&gt;" in page and "eligible-unused" in page
    assert "BF16 tensor: 100 TFLOP/s (measured)" in page
    with pytest.raises(GpuscopeError, match=".png, .svg or .html"):
        roofline_plot.write(points, CEILINGS, tmp_path / "r.pdf", "Roofline")


def test_layer_chart(tmp_path: Path, cache: Path) -> None:
    install_torch_ops_contract()
    with roofline_report(tmp_path / "l.gpuscope") as r:
        layers = layer_points(r)
    fig = roofline_plot.figure(layers, CEILINGS, "Layers")
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == 3


def test_chart_without_calibrated_l2(points: pd.DataFrame) -> None:
    sheet = Ceilings("x", dram_bytes_per_s=2e12, flops={"fp32": 20e12})
    gids = {line.get_gid() for line in roofline_plot.figure(points, sheet, "t").axes[0].get_lines()}
    assert gids == {"ceiling-dram", "ceiling-fp32"}


def test_short_names() -> None:
    assert roofline_plot.short_name("void at::native::vectorized_elementwise_kernel<4, at::native::Add<float>>(int)") \
        == "vectorized_elementwise_kernel"
    assert len(roofline_plot.short_name("x" * 100)) == 48
