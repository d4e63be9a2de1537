"""Table rendering from records (no GPU)."""
from cudnn_explorer.core.records import MIB
from cudnn_explorer.report.format import fmt_mib, fmt_ms
from cudnn_explorer.report.tables import render_direction, render_exploration

from fakes import exploration, fwd_result


def test_units_and_best_mark():
    text = render_direction(fwd_result())
    assert "Find ms" in text and "ws MiB" in text
    lines = text.splitlines()
    best = [l for l in lines if l.startswith("*1")]
    assert len(best) == 1 and "IMPLICIT_PRECOMP_GEMM" in best[0] and "0.2830" in best[0]
    assert "cudnnFindConvolutionForwardAlgorithmEx" in text
    assert "heuristic order (cudnnGet*_v7, no timing): 1. IMPLICIT_PRECOMP_GEMM (TENSOR_OP)" in text


def test_workspace_matrix_and_statuses():
    text = render_direction(fwd_result())
    row = next(l for l in text.splitlines() if l.startswith("FFT_TILING"))
    assert row.split()[1:] == ["900.00"] * 4
    row = next(l for l in text.splitlines() if l.startswith("WINOGRAD "))
    assert row.split()[1:] == ["NOT_SUPPORTED"] * 4


def test_note_column_only_when_needed():
    assert "note" not in render_direction(fwd_result()).splitlines()[2]
    capped = render_direction(fwd_result(cap=100 * MIB))
    assert "needs 900.00 MiB workspace > 100.00 MiB given" in capped
    assert "capped by --max-workspace 100.00 MiB" in " ".join(capped.split())  # wrapped


def test_no_success_line():
    d = fwd_result()
    for r in d.find:
        r.status = "CUDNN_STATUS_NOT_SUPPORTED"
    assert "no algorithm ran successfully" in render_direction(d)


def test_header_states_problem_and_environment():
    text = " ".join(render_exploration(exploration()).split())  # prose wraps at 120
    assert "input 32x3x224x224, weight 64x3x3x3, output 32x64x224x224" in text
    assert "padding 1x1, stride 1x1, dilation 1x1, groups 1" in text
    assert "float32, TF32 allowed (DEFAULT_MATH)" in text
    assert "NVIDIA H200 (compute capability 9.0)" in text and "cuDNN 9.19.0" in text


def test_formatters():
    assert fmt_mib(0) == "0.00" and fmt_mib(100) == "<0.01" and fmt_mib(None) == "-"
    assert fmt_mib(3 * MIB // 2) == "1.50"
    assert fmt_ms(None) == "-" and fmt_ms(-1) == "-" and fmt_ms(0.05712) == "0.0571"
