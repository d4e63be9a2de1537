"""scripts/bench_memory.py without a GPU: the job's progress lines to phases (lines of an
H200 run of the main job), and each phase's peak from samples of the used memory."""
from conftest import load_script

# --verbose lines of the main job on the H200 (2026-12-02), in their order, shortened
LOG = """cudnn_explorer: [   4.4 s] PyTorch child: benchmark
cudnn_explorer: [  11.1 s] PyTorch child: heuristics (benchmark off)
cudnn_explorer: [  14.9 s] fwd: cudnnFind
cudnn_explorer: [  15.2 s] fwd: re-timing 1/14 IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)
cudnn_explorer: [  15.5 s] fwd: legacy round 2: timing 4 rows again (10 ms each)
cudnn_explorer: [  15.6 s] fwd: 4 legacy finalists: timing them in full
cudnn_explorer: [  16.4 s] fwd: building the operation graph
cudnn_explorer: [  16.5 s] fwd: querying the knobs of 81 engines (0.1 s)
cudnn_explorer: [  16.6 s] fwd: engine 63/80 ConvFwd_eng63 (0.1 s)
cudnn_explorer: [  19.5 s] fwd: round 2: timing 3 configs again (10 ms each)
cudnn_explorer: [  19.6 s] fwd: 1 finalists: timing them in full and checking them
cudnn_explorer: [  19.9 s] bwd-data: cudnnFind
cudnn_explorer: [  21.0 s] bwd-data: heuristic mode A (0.0 s)
cudnn_explorer: [  24.0 s] bwd-filter: 5 legacy finalists: timing them in full
cudnn_explorer: [  25.0 s] bwd-filter: 3 finalists: timing them in full and checking them"""


def _bench():
    return load_script("bench_memory")


def test_progress_lines_start_their_phases():
    bench, phase, seen = _bench(), "start", []
    for line in LOG.splitlines():
        phase = bench.phase_of(bench.LINE.match(line).group(1), phase)
        seen.append(phase)
    assert seen == ["PyTorch's children"] * 2 + ["fwd: legacy rows"] * 4 + \
        ["fwd: engine configs"] * 5 + ["bwd-data: legacy rows", "bwd-data: engine configs",
                                       "bwd-filter: legacy rows", "bwd-filter: engine configs"]
    # a line that starts no phase leaves it as it was
    assert bench.phase_of("the environment read", "fwd: legacy rows") == "fwd: legacy rows"
    # one finalist is said in the singular
    assert bench.phase_of("bwd-data: 1 legacy finalist: timing it in full",
                          "bwd-data: engine configs") == "bwd-data: legacy rows"
    assert bench.phase_of("bwd-data: 1 finalist: timing it in full and checking it",
                          "bwd-data: legacy rows") == "bwd-data: engine configs"


def test_each_phase_peaks_above_the_memory_used_before():
    bench, mib = _bench(), 2**20
    base = 1000 * mib
    samples = [(0.0, base), (1.0, base + 600 * mib), (2.0, base + 500 * mib),
               (3.0, base + 900 * mib), (4.0, base + 100 * mib)]
    marks = [(0.5, "PyTorch's children"), (2.5, "fwd: legacy rows"),
             (3.5, "fwd: engine configs")]
    assert bench.phase_peaks(samples, marks, base) == {
        "start": 0.0, "PyTorch's children": 600.0, "fwd: legacy rows": 900.0,
        "fwd: engine configs": 100.0}
    assert bench.phase_peaks([], marks, base) == {}
