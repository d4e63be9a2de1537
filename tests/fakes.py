"""Realistic fake results (shaped like the native module's output) for CPU tests, and a
fake bench that runs the whole pipeline without a GPU."""
import contextlib
import dataclasses
import os
import shutil
import textwrap
from types import SimpleNamespace as NS

from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.exploration import Environment, Exploration, Measurement
from cudnn_explorer.core.records import (MIB, AlgoResult, DirectionResult, Timing,
                                         WorkspaceEntry, find_row_note)

OK = "CUDNN_STATUS_SUCCESS"
NS_ = "CUDNN_STATUS_NOT_SUPPORTED"
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

_FWD_FIND = [  # (algo, name, math, status, Find ms, workspace)
    (1, "IMPLICIT_PRECOMP_GEMM", "TENSOR_OP_MATH", OK, 0.283, 3 * MIB // 2),
    (0, "IMPLICIT_GEMM", "DEFAULT_MATH", OK, 0.512, 0),
    (2, "GEMM", "DEFAULT_MATH", OK, 0.401, 40 * MIB),
    (5, "FFT_TILING", "DEFAULT_MATH", "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE", None,
     900 * MIB),
    (6, "WINOGRAD", "DEFAULT_MATH", NS_, None, 0),
]
# A row only Find under TENSOR_OP_MATH returns: faster than any of PyTorch's candidates.
_MORE_UNDER_TENSOR_OP = [(7, "WINOGRAD_NONFUSED", "TENSOR_OP_MATH", OK, 0.19, 2 * MIB)]
_NAMES = ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
          "WINOGRAD", "WINOGRAD_NONFUSED"]
_SIZES = {0: 0, 1: 3 * MIB // 2, 2: 40 * MIB, 5: 900 * MIB}
_MATHS = ("DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH")


def algo(i, name, math, status=OK, t=None, ws=0, det=True, note="", **kw):
    return AlgoResult(algo=i, algo_name=name, math_type=math, status=status,
                      status_code=0 if status == OK else 3000, time_ms=t, workspace_bytes=ws,
                      deterministic=det, note=note, **kw)


def workspace_entries():
    return [WorkspaceEntry(i, n, m, OK if _SIZES.get(i) is not None else NS_, _SIZES.get(i))
            for i, n in enumerate(_NAMES) for m in _MATHS]


def fwd_result(cap=None):
    given = 900 * MIB if cap is None else min(cap, 900 * MIB)
    find = [algo(i, n, m, st, t, ws,
                 note="" if st == OK else find_row_note(max(_SIZES.get(i) or 0, ws), given,
                                                        cap is not None))
            for i, n, m, st, t, ws in _FWD_FIND]
    heur = [algo(1, "IMPLICIT_PRECOMP_GEMM", "TENSOR_OP_MATH", ws=3 * MIB // 2),
            algo(0, "IMPLICIT_GEMM", "DEFAULT_MATH")]
    return DirectionResult("fwd", "DEFAULT_MATH", find, heur, workspace_entries(), 900 * MIB,
                           given, cap, 32, 5)


ENV = Environment(gpu_name="NVIDIA H200", compute_capability="9.0", torch_version="2.11.0",
                  torch_cuda="13.0", cudnn_torch="91900", cudnn_runtime="91900",
                  cudnn_built="91900", torch_built="2.11.0", cuda_runtime="13000",
                  cuda_driver="13000")


def exploration(cap=None):
    p = ConvProblem.create("32,3,224,224", kernel=3)
    return Exploration(p, ENV, [fwd_result(cap)], tool_version="0.1.0",
                       created="2026-11-30T00:00:00+00:00")


def timing(median, spread=0.02, method="graph", eager=None):
    return Timing(median_ms=median, p25_ms=median * (1 - spread / 2),
                  p75_ms=median * (1 + spread / 2), min_ms=median * 0.97, samples=50,
                  launches_per_sample=10, method=method, spread=spread, warmup_launches=12,
                  eager=None if eager is None else dataclasses.replace(
                      timing(eager, method="wall"), warmup_launches=0))


def retimed_exploration():
    """fwd rows re-timed and checked: Find's order differs from the steady-state one, and
    the fastest row by median is WRONG."""
    e = exploration()
    d = e.directions[0]
    checked = dict(tolerance=1e-2, max_error=1e-3, output_finite=True, peak_tflops=494.7,
                   peak_unit="TF32 tensor core")
    new = {"IMPLICIT_PRECOMP_GEMM": dict(timing=timing(0.210, eager=0.260), **checked),
           "IMPLICIT_GEMM": dict(timing=timing(0.500, spread=0.25), **checked),  # noisy
           "GEMM": dict(timing=timing(0.150), **dict(checked, max_error=0.5))}  # WRONG
    find = [dataclasses.replace(r, **new.get(r.algo_name, {})) for r in d.find]
    d2 = dataclasses.replace(d, find=find, flops=2 * 32 * 64 * 224 * 224 * 3 * 9,
                             min_bytes=(32 * 3 * 224 * 224 + 64 * 27 + 32 * 64 * 224 * 224) * 4)
    return dataclasses.replace(
        e, directions=[d2],
        measurement=Measurement(retimed=True, budget_ms=100, method="graph",
                                eager_budget_ms=25, reference="float64 reference",
                                peak_source="test table", bandwidth_gbs=4800.0))


# ----------------------------------------------------------------------------- fake bench
def fake_timing(spec, median):
    """What the native timer returns under TimingSpec ``spec``: its method, and the eager
    wall-clock samples when asked for (as csrc/timing.cpp does)."""
    method = spec.method
    eager = [median * 1.3] * 5 if spec.eager_budget_ms > 0 else []
    return Timing.from_samples([median] * 5, 1 if spec.flush_l2 else 10, method, 12, "",
                               eager, 10 if eager else 0)


class FakeLab:
    """LegacyLab's four methods over canned Find rows (fwd_result's), no GPU."""

    def __init__(self, problem, direction, options, calls):
        self.direction, self.calls = direction, calls
        self.reference_on_cpu = False
        self.setup_s, self.checks_s = 0.25, 0.0  # a check costs 0.002 s here

    def find(self, cap):
        given = 900 * MIB if cap is None else min(cap, 900 * MIB)
        # Find under PyTorch's math type, then under TENSOR_OP_MATH: the second call
        # returns the first's rows again and one more (as cuDNN does for bfloat16).
        rows = [NS(algo=i, algo_name=n, math_type=m, status=st,
                   status_code=0 if st == OK else 3000, time_ms=-1 if t is None else t,
                   memory_bytes=ws, deterministic=True, found_under=under)
                for under, found in (("DEFAULT_MATH", _FWD_FIND),
                                     ("TENSOR_OP_MATH", _FWD_FIND + _MORE_UNDER_TENSOR_OP))
                for i, n, m, st, t, ws in found]
        if cap is not None:  # a row that needs more than the cap does not run
            rows = [r if r.memory_bytes <= given else NS(**{**vars(r), "status": NS_,
                                                           "status_code": 3000, "time_ms": -1})
                    for r in rows]
        ws = [NS(algo=w.algo, algo_name=w.algo_name, math_type=w.math_type, status=w.status,
                 bytes=-1 if w.bytes is None else w.bytes) for w in workspace_entries()]
        return NS(math_type="DEFAULT_MATH", find=rows, heuristics=rows[:2], workspace=ws,
                  workspace_needed=900 * MIB, workspace_given=given, requested=32,
                  returned=len(_FWD_FIND) + len(_MORE_UNDER_TENSOR_OP), find_wall_ms=12.5, find_wall_ms_all=30.0,
                  searched=["DEFAULT_MATH", "TENSOR_OP_MATH"], workspace_free=-1,
                  find_errors=[])

    def measure(self, algo, math_type, spec, check, cutoff_ms=0.0, records=False,
                records_over=None):
        from cudnn_explorer.core.staging import is_record
        from cudnn_explorer.measure.tensors import Check

        self.calls.append(("measure", self.direction, algo, spec))
        median = {1: 0.21, 0: 0.5, 2: 0.3, 7: 0.18}[algo]
        timing = None if spec is None else fake_timing(spec, median)
        if records and not is_record(timing.median_ms if timing else None, records_over):
            check = False
        self.checks_s += 0.002 if check else 0.0
        return timing, Check(1e-3, 1e-2, True) if check else None

    def kernels(self, algo, math_type):
        return (f"kernel_{algo}",)

    def close(self):
        self.calls.append(("close", self.direction))


# A child of ours that behaves like measure/problem_child.py without a GPU: it writes the logs
# PyTorch would (saved H200 logs) and times by the spec it was given.
FAKE_CHILD = textwrap.dedent("""\
    import json, os, shutil, sys
    spec = json.load(open(sys.argv[1]))
    t = spec["timing"]
    fe, api = {fe!r}, {api!r}
    if spec["log_file"]:
        shutil.copy(fe, spec["log_file"])
    else:
        shutil.copy(api, os.environ["CUDNN_LOGDEST_DBG"])
    method = "eager+flush" if t["flush_l2"] else ("graph" if t["graph"] else "eager")
    eager = None
    if t["retime"] and not t["flush_l2"]:
        eager = dict(median_ms=0.3, p25_ms=0.3, p75_ms=0.3, min_ms=0.3, samples=5,
                     launches_per_sample=10, method="wall", spread=0.0)
    steady = dict(median_ms=0.2, p25_ms=0.2, p75_ms=0.2, min_ms=0.2, samples=5,
                  launches_per_sample=1 if t["flush_l2"] else 10, method=method, spread=0.0,
                  eager=eager) if t["retime"] else None
    out = dict(settings=dict(benchmark_limit=spec["benchmark_limit"] if spec["benchmark_limit"]
                             is not None else 10), directions=[
        dict(direction=d, first_call_ms=500.0, first_peak_alloc_bytes=1 << 20,
             first_reserved_growth_bytes=2 << 20, steady=steady, steady_peak_alloc_bytes=1 << 19,
             kernels=["kernel_1"],
             check=dict(max_error=1e-3, tolerance=1e-2, output_finite=True)
             if spec["check"] else None)
        for d in spec["directions"]],
        phases_s={{"cuda": 0.0001, "tensors": 0.0, "first calls": 0.0001, "checks": 0.0,
                  "kernels": 0.0, "steady": 0.0001}})
    json.dump(out, open(sys.argv[2], "w"))
    """)


class FakeSearch:
    """The extension's EngineSearch without a GPU: two engines, engine 1 with one knob;
    measure() times by the native TimingOptions it is given, like csrc/engines.cpp."""

    def __init__(self, seen):
        self.seen = seen

    def engine_count(self):
        return 2

    def engine_info(self, e):
        knobs = [NS(type=2, min_value=0, max_value=1, stride=1)] if e == 1 else []
        return NS(engine=e, status="OK", knobs=knobs)

    def heuristics(self, mode):
        return ["eng1_k2=1"] if mode == "A" else []

    def build(self, e, knobs):
        name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
        return NS(status="built", message="", name=name, numeric_notes=["TENSOR_CORE"],
                  behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                  plan_index=0, timing=None)

    def measure(self, built, timed, opt):
        from cudnn_explorer.core.options import TimingSpec

        self.seen.append((built.name, timed, opt.flush_l2, opt.use_graph, opt.budget_ms,
                          opt.eager_budget_ms))
        spec = TimingSpec(retime=timed, budget_ms=opt.budget_ms, flush_l2=opt.flush_l2,
                          graph=opt.use_graph, eager=opt.eager_budget_ms > 0)
        t = fake_timing(spec, 0.1 + 0.01 * len(self.seen)) if timed else None
        per = [] if t is None else [t.median_ms] * 5
        native = None if t is None else NS(
            per_launch_ms=per, launches_per_sample=t.launches_per_sample, method=t.method,
            warmup_launches=12, note="", eager_per_call_ms=[t.eager.median_ms] * 5
            if t.eager else [], eager_calls_per_sample=10 if t.eager else 0,
            kernels=[], kernels_read=False)
        return NS(**{**vars(built), "status": "OK", "timed": timed, "timing": native})


class FakeOut:
    def fill_(self, v):
        return self


class FakeBench:
    """GpuBench's methods without a GPU: canned Find rows, PyTorch's children as real
    child processes (FAKE_CHILD, through measure.pytorch_picks.run_child), and engine configs
    through the real measure.engines.explore_engines over FakeSearch."""

    def __init__(self, tmp_path, monkeypatch):
        (tmp_path / "fake_torch_child.py").write_text(FAKE_CHILD.format(
            fe=os.path.join(FIX, "default_benchmark.fe.log"),
            api=os.path.join(FIX, "legacy_api_default.log")))
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
        self.calls, self.seen = [], []

    def environment(self):
        return ENV

    def free_bytes(self):
        return None  # a fake GPU cannot say

    def frontend_available(self):
        return True

    def children(self, problem, options, say):
        from cudnn_explorer.measure.pytorch_picks import run_children

        return run_children(problem, options, say, child_module="fake_torch_child")

    def prestart(self, problem, options):
        self.calls.append(("prestart",))

    def lab(self, problem, direction, options):
        return FakeLab(problem, direction, options, self.calls)

    def hold_engines(self, problem, direction, options, preferred_tags, finalist_tags=None):
        self.calls.append(("hold", direction))
        return None  # no worker to hand a job to ahead: engines() does it all

    def engines(self, problem, direction, options, legacy_rows, preferred_tags, say,
                finalist_tags=None, held=None):
        from cudnn_explorer.measure.engines import PreparedSearch, explore_engines
        from cudnn_explorer.measure.search_inputs import (DirectionData, SearchSettings,
                                                          Supervision)

        self.preferred = getattr(self, "preferred", {})
        self.preferred[direction] = list(preferred_tags)
        self.legacy_seen = getattr(self, "legacy_seen", {})
        self.legacy_seen[direction] = [f"{r.algo_name} ({r.math_type})" for r in legacy_rows
                                       if r.kernels]

        return explore_engines(
            DirectionData(problem, direction, None,
                          {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
            SearchSettings(legacy_rows=legacy_rows, max_per_engine=options.engine_configs,
                           time_budget_s=options.engine_budget_s, timing=options.timing,
                           kernels=False, preferred_tags=preferred_tags,
                           staged=options.staged, finalist_tags=finalist_tags),
            Supervision(progress=say), PreparedSearch(FakeSearch(self.seen)))

    def scope(self):
        return contextlib.nullcontext()

    def close(self):
        self.closed = getattr(self, "closed", 0) + 1


# ------------------------------------------------------------------ fake engine workers
# What every fake engine worker module shares (tests/test_engine_worker.py): its imports, the output tensor's stand-in, and the
# real engine_serve.main over the module's Search (appended last).
WORKER_HEAD = textwrap.dedent("""\
    import os, sys, time
    from types import SimpleNamespace as NS
    from cudnn_explorer.measure import engine_serve

    class Out:
        def fill_(self, v):
            return self
    """)
WORKER_TAIL = textwrap.dedent("""\

    def setup(problem, direction, device, seed, check):
        return None, {"x": Out(), "w": Out(), "y": Out()}, None

    sys.exit(engine_serve.main(sys.argv[1:], setup=setup, search=Search()))
    """)

# torch's last words on a worker's stderr when it runs out of GPU memory (an uncaught
# OutOfMemoryError; the numbers as an H100 with about 2 GiB free would give them)
OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 "
            "has a total capacity of 79.19 GiB of which 1.02 GiB is free.")
# A worker of three engines without knobs, each timed (engine e: 0.1 + 0.1 e ms); in fwd,
# engine 2 runs out of GPU memory while it runs, and the process dies saying so. Each
# start appends its pid to the file STARTS names, when set.
SHORT_OF_MEMORY_WORKER = WORKER_HEAD + textwrap.dedent("""\
    if os.environ.get("STARTS"):
        with open(os.environ["STARTS"], "a") as f:
            f.write(f"{os.getpid()} ")
    JOB = {}

    class Search:
        def engine_count(self):
            return 3
        def engine_info(self, e):
            return NS(engine=e, status="OK", knobs=[])
        def heuristics(self, mode):
            return []
        def build(self, e, knobs):
            return NS(status="built", message="", name="eng%d" % e, numeric_notes=[],
                      behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                      plan_index=e, timing=None)
        def measure(self, built, timed, opt):
            if built.plan_index == 2 and JOB["direction"] == "fwd":
                print(OOM_LINE, file=sys.stderr, flush=True)
                os._exit(1)
            t = 0.1 + 0.1 * built.plan_index
            native = NS(per_launch_ms=[t] * 5, launches_per_sample=10, method="graph",
                        warmup_launches=12, note="", eager_per_call_ms=[],
                        eager_calls_per_sample=0, kernels=[], kernels_read=False)
            return NS(**{**vars(built), "status": "OK", "timed": timed, "timing": native})

    def setup(problem, direction, device, seed, check):
        JOB["direction"] = direction
        return None, {"x": Out(), "w": Out(), "y": Out()}, None

    sys.exit(engine_serve.main(sys.argv[1:], setup=setup, search=Search()))
    """).replace("OOM_LINE", repr(OOM_LINE))


def copy_fixture(name, dest):
    shutil.copy(os.path.join(FIX, name), dest)
