"""NVTX ranges recorded through CUPTI on the H200 machine, from several sources."""

from __future__ import annotations

from collections import Counter

from gpuscope.trace.report import Report


def test_training_step_ranges(mlp_api: Report) -> None:
    r = mlp_api.ranges()
    assert Counter(r["name"]) == {"step": 4, "forward": 4, "backward": 4, "optimizer": 4}
    assert set(r["kind"]) == {"range"} and r["end_ns"].notna().all()
    steps = r[r["name"] == "step"].reset_index(drop=True)
    for name in ("forward", "backward", "optimizer"):
        inner = r[r["name"] == name].reset_index(drop=True)
        assert ((inner["start_ns"] >= steps["start_ns"]) & (inner["end_ns"] <= steps["end_ns"])).all()
    # the forward GEMMs (one per layer and step) were queued while a forward range was open
    k = mlp_api.kernels()
    gemm = k[k["name"].str.contains("gemm_f32f32_f32f32_f32_tn_n")]
    fwd = r[r["name"] == "forward"]
    inside = gemm["queued_ns"].apply(lambda q: ((fwd["start_ns"] <= q) & (q <= fwd["end_ns"])).any())
    assert inside.sum() == 32


def test_sources_of_nvtx(recorded) -> None:
    with Report.open(recorded("nvtx_sources")) as report:
        r = report.ranges()
    names = set(r["name"])
    assert {"torch_push_outer", "torch_push_inner"} <= names  # torch.cuda.nvtx push/pop
    assert r.loc[r["name"] == "torch_mark", "kind"].tolist() == ["mark"]
    assert "aten::mm, seq = 2, op_id = 2" in names  # torch.autograd.profiler.emit_nvtx
    backward = r[r["name"].str.startswith("autograd::engine::evaluate_function")]
    assert len(backward) > 0 and set(backward["tid"]).isdisjoint(set(r.loc[r["name"] == "torch_push_outer", "tid"]))
    pkg = r[r["name"] == "nvtx_push"]
    assert pkg["domain"].tolist() == ["pkg_domain"]  # the nvtx package, in a named domain
    outer = r[r["name"] == "torch_push_outer"].iloc[0]
    inner = r[r["name"] == "torch_push_inner"].iloc[0]
    assert outer["start_ns"] <= inner["start_ns"] and inner["end_ns"] <= outer["end_ns"]
