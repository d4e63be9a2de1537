"""How long until a fresh process's first output, and the end of its first training step,
with benchmark mode on, off, and pinned plans built on first call, ahead, or kept; and
(``--first-calls``) what do PyTorch's first calls of one convolution cost in each cuDNN
mode, with an empty CUDA JIT cache and with one that a run before filled?

``python -m benchmarks.cold_start [--models resnet50-infer-b1,...] [--repeats 3]
[--plans NAME=FILE ...] [--warm-jit] [--profile]``: per model, every mode in a fresh process, the
modes in turns, each process with an empty CUDA JIT cache (a fresh machine or container;
``--warm-jit``: one cache per repeat, shared, as on a machine that ran before). Times are
from the process's start (the kernel's count: Python's start and imports included)
to the first output (the first forward's result, synchronised) and to the end of the
first training step (forward, backward and an SGD step, synchronised). Pinned modes pin
every convolution layer to the plan file: "pinned" builds each plan on its first call,
"pinned ahead" builds them on threads at pin() time, "pinned kept" restores the plans a
setup process kept (pinning/kept.py). Without ``--plans``, a setup process writes a plan
file of cuDNN's first heuristic config (mode A) that builds for every problem-direction of
the model: the kernels benchmark off runs, so that the pinned modes differ from it by
their start alone. The same two times are also counted from the model built on the GPU
(the part a mode changes), beside a third step's, warm, and the steady step as CUDA-graph
replays of the whole step (the median over 1 s of replays, timed as the tool times a
callable; in a pinned process only where no call fell back while the graph was warmed
and captured: the steady step of the plans as built, ahead or restored; not in the
profiled process). Pinned processes add the op's
own counts: plans of run-time compiled and of precompiled engines, how many and what
making them took (summed over the threads that made them; per engine, a line on
stderr), plans restored from kept forms, first calls' waits for plans built ahead, and
the first step's rest: its time less the warm step's and less what it spent on plans
on its own path (library and kernel-module loads, the allocator, all outside the plans).
``--profile`` adds a process per model, pinned with kept plans, whose first step runs
under torch.profiler: the rest split by the host time of the CUDA calls (kernel launches,
with the lazy loads of kernel modules inside them; allocations; synchronisations), and
its top events on stderr; and under cProfile, whose top Python-level calls by own time
(stderr) show what no profiler event covers (imports, waits in torch's C++ outside an
operator). The profilers' start is in that process's times: read its split. Its pin()
runs under cProfile too, and its top calls by time in all (stderr) split the mode's own
start: the package's imports, the plan file, the environment check, the builds started.

``python -m benchmarks.cold_start --first-calls [--shape 32,3,224,224] [--kernel 3]
[--out-channels 64] [--dtype float32] [--repeats 3]``: one convolution instead of the
models, in each of PyTorch's cuDNN modes ("heuristic": benchmark off; "benchmark";
"deterministic") in a fresh process, in turns. Each process loads cuDNN with a tiny
convolution, then times its first forward and first backward call of the problem
(synchronised). Row "empty cache": every process its own empty ``CUDA_CACHE_PATH``; row
"shared cache": a repeat's processes share one, so a mode may reuse what a mode before it
compiled (the order turns every repeat). The problem command's verdict "benchmark mode
cost N ms once" is benchmark's first calls less the heuristic mode's. The result goes to
data/benchmarks/cold_start-first_calls.json unless ``--json`` says otherwise; the models'
options (``--models``, ``--plans``, ``--warm-jit``) do not go with it.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
MODES = ("benchmark on", "benchmark off", "pinned", "pinned ahead", "pinned kept")
# name: (torchvision model or "decoder", batch, dtype, channels_last, train)
MODELS = {
    "resnet50-infer-b1": ("resnet50", 1, "float16", True, False),
    "resnet50-train-b32": ("resnet50", 32, "float16", True, True),
    "efficientnet_b0-train-b32": ("efficientnet_b0", 32, "float16", True, True),
    "mobilenet_v3_large-train-b32": ("mobilenet_v3_large", 32, "float16", True, True),
    "convnext_tiny-train-b16": ("convnext_tiny", 16, "bfloat16", True, True),
    "decoder-train-b8": ("decoder", 8, "bfloat16", False, True),
}
DEFAULT = ("resnet50-infer-b1", "resnet50-train-b32", "efficientnet_b0-train-b32",
           "mobilenet_v3_large-train-b32", "convnext_tiny-train-b16", "decoder-train-b8")
FIGURES = [Figure("torch_imported_s", "torch imported", "s", better=""),
           Figure("model_built_s", "model built on the GPU (training: its optimizer too)", "s",
                  better=""),
           Figure("mode_set_s", "mode set (plans loaded, builds started)", "s", better=""),
           Figure("first_output_s", "first output", "s"),
           Figure("first_step_s", "end of first training step", "s"),
           Figure("output_after_model_s", "first output, from the model built", "s"),
           Figure("step_after_model_s", "first training step, from the model built", "s"),
           Figure("warm_step_ms", "a third step, warm", "ms"),
           Figure("steady_ms", "steady step on the GPU, CUDA-graph replays (median)", "ms"),
           Figure("compiled_plans", "plans of run-time compiled engines", "plans", better=""),
           Figure("compiled_ms", "making those (op's count)", "ms"),
           Figure("precompiled_plans", "plans of precompiled engines", "plans", better=""),
           Figure("precompiled_ms", "making those (op's count)", "ms"),
           Figure("restored", "plans restored from kept forms", "plans", better=""),
           Figure("waited_ms", "first calls waiting for plans built ahead", "ms"),
           Figure("rest_ms", "first step's rest: not plans, not the warm step", "ms"),
           Figure("launch_ms", "profiled: kernel launches, lazy module loads within", "ms",
                  better=""),
           Figure("malloc_ms", "profiled: cudaMalloc and cudaFree, the allocator's growth", "ms",
                  better=""),
           Figure("sync_ms", "profiled: synchronisations, waiting for the GPU", "ms",
                  better="")]
# --profile: one more process per model, pinned with kept plans, its first step under
# torch.profiler (CUPTI's start and the profiler's own cost are in its times, so only its
# split is read): where the first step's rest goes, by the CUDA runtime calls' host time
PROFILED = "pinned kept, profiled"
# figure: the CUDA runtime and driver calls whose host time it sums (names as they start)
SPLIT = {"launch_ms": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel"),
         "malloc_ms": ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaMallocHost"),
         "sync_ms": ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")}
BENCH = harness.Benchmark("cold_start", QUESTION, FIGURES, baseline="benchmark off")
# --first-calls: one convolution's first calls in each of PyTorch's cuDNN modes, named as
# the tool names them ("heuristic": benchmark off)
CALL_MODES = ("heuristic", "benchmark", "deterministic")
CALL_FIGURES = [Figure("fwd_ms", "first forward call", "ms"),
                Figure("bwd_ms", "first backward call (both gradients)", "ms")]
CALLS_QUESTION = ("What do PyTorch's first calls of one convolution cost in each cuDNN mode, "
                  "with an empty CUDA JIT cache and with one that a run before filled?")
CALLS = harness.Benchmark("cold_start", CALLS_QUESTION, CALL_FIGURES, baseline="heuristic")
CALL_DEFAULTS = {"shape": "32,3,224,224", "kernel": 3, "out_channels": 64, "dtype": "float32"}
JSON = "data/benchmarks/cold_start.json"
CALLS_JSON = "data/benchmarks/cold_start-first_calls.json"
# (flag, dest) of the options of one kind of run: the models' (not with --first-calls) and
# the one convolution's (only with it)
MODELS_ONLY = (("--models", "models"), ("--plans", "plans"), ("--warm-jit", "warm_jit"),
               ("--profile", "profile"))
CALLS_ONLY = (("--shape", "shape"), ("--kernel", "kernel"), ("--out-channels", "out_channels"),
              ("--dtype", "dtype"))


def decoder():
    """A transposed-convolution decoder (an upsampling generator's head), 8x8 to 256x256."""
    import torch.nn as nn

    layers, c = [nn.Conv2d(3, 256, 3, stride=32, padding=1)], 256
    for out in (256, 128, 64, 32, 16):
        layers += [nn.ConvTranspose2d(c, out, 4, stride=2, padding=1), nn.BatchNorm2d(out),
                   nn.ReLU(inplace=True)]
        c = out
    layers.append(nn.Conv2d(c, 3, 3, padding=1))
    return nn.Sequential(*layers)


def _model(name):
    import torch

    arch, batch, dtype, cl, train = MODELS[name]
    if arch == "decoder":
        model = decoder()
    else:
        import torchvision

        model = torchvision.models.get_model(arch, weights=None)
    model = model.cuda().train(train)
    fmt = torch.channels_last if cl else torch.contiguous_format
    return model.to(memory_format=fmt), batch, getattr(torch, dtype), fmt, train


def _step(model, batch, dtype, fmt, opt, at):
    """The first output, then (training: ``opt`` the optimizer) the rest of the step;
    ``at`` hears the moments. Returns the step's closure, to time a warm step after, and
    the same step with no synchronisation and no zeroing of the gradients (``body``), for
    a CUDA graph to capture (autocast's weight cache off, as a capture needs)."""
    import torch

    train = opt is not None
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)

    def forward(cache: bool = True):
        with torch.autocast("cuda", dtype=dtype, cache_enabled=cache), \
                torch.set_grad_enabled(train):
            return model(x)

    def rest(out):
        out.float().square().mean().backward()
        opt.step()

    def step(at):
        out = forward()
        torch.cuda.synchronize()
        at("first_output_s")
        if train:
            rest(out)
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            at("first_step_s")

    def body():
        out = forward(cache=False)
        if train:
            rest(out)

    step(at)
    return step, body


STEADY_BUDGET_MS = 1000.0  # the steady step's replays are sampled for this long (ms)


def steady_ms(torch, body, zero_grad, counts=None):
    """The step's median ms on the GPU as replays of a CUDA graph of the whole step
    (measure/step_graph.py), timed as the tool times a callable (measure/timing.py); or
    None, said in one line on stderr, where its graph fails, or where the calls that fell
    back (``counts``: a pinned process's op.pin_counts) grew while the graph was warmed and
    captured: such a graph would run PyTorch's kernels, not the plans. After the first
    steps, so that every mode's plans are made and its cache of benchmark picks full:
    the plans the steady step runs, whether built on first call, ahead or restored."""
    from cudnn_explorer.core.errors import described
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure.step_graph import capture_step
    from cudnn_explorer.measure.timing import time_callable

    before = counts().fallback_calls if counts else 0
    replay, why = capture_step(torch, body, zero_grad, "cuda")
    fell_back = counts().fallback_calls - before if counts else 0
    if replay is not None and fell_back:
        why = (f"{fell_back} call(s) fell back to PyTorch's convolution while its graph was "
               f"warmed and captured")
    elif replay is not None:
        try:
            return time_callable(replay, TimingSpec(graph=False, eager=False,
                                                    budget_ms=STEADY_BUDGET_MS)).median_ms
        except Exception as e:  # noqa: BLE001  (the other figures stand without this one)
            why = f"its replays failed ({described(e, 200)})"
    print(f"cold_start: the steady step not timed: {why}", file=sys.stderr)
    return None


def made_figures(step_ms: float, warm_ms: float, on_first_call: bool) -> dict:
    """What the op's counts say of the plans made so far: how many and how long (ms, summed
    over the threads that made them), for run-time compiled engines and precompiled ones,
    restored from kept forms, first calls' waits; and the first step's rest (ms): its time
    less a warm step's and less what it spent on plans (building them, ``on_first_call``,
    or waiting for those built ahead). Per engine, one line on stderr each."""
    from cudnn_explorer.core.logs import parse_tag
    from cudnn_explorer.pinning import op

    made = op.plans_made()
    compiled = [m for m in made if m.runtime_compiled]
    pre = [m for m in made if not m.runtime_compiled]
    per_engine: dict = {}
    for m in made:
        e = per_engine.setdefault((parse_tag(m.tag).engine, m.runtime_compiled), [0, 0.0])
        e[0] += 1
        e[1] += m.build_ms
    for (engine, rc), (n, ms) in sorted(per_engine.items(), key=lambda kv: -kv[1][1]):
        print(f"cold_start: engine {engine} ({'run-time compiled' if rc else 'precompiled'}):"
              f" {n} plan(s), {ms:,.1f} ms made", file=sys.stderr)
    counts = op.pin_counts()
    figures = {"compiled_plans": len(compiled), "compiled_ms": sum(m.build_ms for m in compiled),
               "precompiled_plans": len(pre), "precompiled_ms": sum(m.build_ms for m in pre),
               "restored": sum(m.restored for m in made),
               "waited_ms": sum(m.waited_ms for m in made),
               "pinned_calls": counts.pinned_calls, "fallback_calls": counts.fallback_calls}
    on_plans = (figures["compiled_ms"] + figures["precompiled_ms"] if on_first_call
                else figures["waited_ms"])
    figures["rest_ms"] = step_ms - warm_ms - on_plans
    return figures


def profile_split(events, top: int = 12) -> dict:
    """The profiled first step's split: per SPLIT figure, the summed host time (ms) of the
    calls it names, from ``events`` ((name, self CPU µs) pairs, the profiler's averages);
    and the ``top`` events by self time, one line each on stderr."""
    figures = {key: 0.0 for key in SPLIT}
    for name, self_us in events:
        for key, prefixes in SPLIT.items():
            if name.startswith(prefixes):
                figures[key] += self_us / 1e3
    for name, self_us in sorted(events, key=lambda e: -e[1])[:top]:
        print(f"cold_start: profiled first step: {self_us / 1e3:10,.1f} ms  {name[:70]}",
              file=sys.stderr)
    return figures


def python_split(python, what: str = "first step", top: int = 8, by: str = "own") -> None:
    """The profiled ``what``'s ``top`` Python-level calls by their own time (``by``
    "own"; a call into torch's C++ counts whole, the imports and waits it makes included)
    or by their time in all ("total"), one line each on stderr."""
    import pstats

    # (file, line, name): (primitive calls, calls, own s, total s, callers)
    stats = pstats.Stats(python).stats
    column = {"own": 2, "total": 3}[by]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][column])[:top]
    for (file, line, name), (_, calls, own_s, total_s, _) in rows:
        where = name if file == "~" else f"{os.path.basename(file)}:{line} {name}"
        print(f"cold_start: profiled {what} (Python): {own_s * 1e3:10,.1f} ms own, "
              f"{total_s * 1e3:10,.1f} ms in all, {calls} call(s)  {where[:60]}", file=sys.stderr)


def process_age_s() -> float:
    """Seconds since this process started (the kernel's own count, 10 ms ticks)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return up - start_ticks / os.sysconf("SC_CLK_TCK")


def child(a) -> int:
    figures = {}

    def write(figures):  # whole or not at all, for the parent to read (after the timings)
        from cudnn_explorer.core.files import write_atomic

        write_atomic(a.out, json.dumps(figures))

    def at(key):
        figures[key] = process_age_s()

    import torch

    at("torch_imported_s")
    model, batch, dtype, fmt, train = _model(a.model)
    # Note [the optimizer with the model]: a training process makes its optimizer with its
    # model, before any step. torch.optim's first optimizer imports torch._dynamo (its
    # add_param_group is wrapped by torch._disable_dynamo): 1-3 s of Python imports, which
    # torchvision's import pays ahead for its models. Made inside the first step, it was
    # the decoder's "rest" in every mode.
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if train else None
    at("model_built_s")
    if a.child.startswith("benchmark"):
        torch.backends.cudnn.benchmark = a.child == "benchmark on"
    else:
        import cudnn_explorer as ce

        keep = a.kept if a.child in ("pinned kept", PROFILED) else False
        if a.child == PROFILED:  # where pin()'s own time goes: imports, the file, the checks
            import cProfile

            pinning = cProfile.Profile()
            pinning.runcall(ce.pin, model, a.plan_file, keep=keep)
        else:
            ce.pin(model, a.plan_file, ahead=a.child != "pinned", keep=keep)
    at("mode_set_s")
    if a.child == PROFILED:
        python_split(pinning, "pin()", top=14, by="total")  # after the mode set's time
        import cProfile

        from torch.profiler import ProfilerActivity, profile

        python = cProfile.Profile()  # what no profiler event covers: Python, imports, waits
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            python.enable()
            try:
                step, body = _step(model, batch, dtype, fmt, opt, at)
            finally:
                python.disable()
        figures.update(profile_split([(e.key, e.self_cpu_time_total)
                                      for e in prof.key_averages()]))
        python_split(python)
    else:
        step, body = _step(model, batch, dtype, fmt, opt, at)
    last = "first_step_s" if train else "first_output_s"  # the end of the first step
    figures["output_after_model_s"] = figures["first_output_s"] - figures["model_built_s"]
    if train:
        figures["step_after_model_s"] = figures["first_step_s"] - figures["model_built_s"]
    step(lambda key: None)  # the second step
    t0 = time.perf_counter()
    step(lambda key: None)  # the third, warm: every plan made, every kernel loaded
    figures["warm_step_ms"] = (time.perf_counter() - t0) * 1e3
    if a.child.startswith("pinned"):
        step_ms = (figures[last] - figures["mode_set_s"]) * 1e3
        figures.update(made_figures(step_ms, figures["warm_step_ms"],
                                    on_first_call=a.child == "pinned"))
    write(figures)  # what stands whatever the graph below does to the process
    if a.child != PROFILED:  # (the profiled process's times: only its split is read)
        counts = None
        if a.child.startswith("pinned"):
            from cudnn_explorer.pinning import op

            counts = op.pin_counts

        def zero_grad():
            if opt is not None:
                opt.zero_grad(set_to_none=True)

        steady = steady_ms(torch, body, zero_grad, counts)
        if steady is not None:
            figures["steady_ms"] = steady
            write(figures)
    return 0


def setup(a) -> int:
    """Writes the model's plan file (cuDNN's first heuristic config that builds, per
    problem-direction) unless one was given, then the kept plans of it."""
    import torch

    import cudnn_explorer as ce
    from cudnn_explorer.core.logs import parse_tag
    from cudnn_explorer.core.plans import PlanEntry, PlanEnvironment, PlanFile, PlanKey
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.environment import environment
    from cudnn_explorer.measure.tensors import make_tensors, native_problem

    prefix = {"fwd": "ConvFwd", "bwd-data": "ConvBwdData", "bwd-filter": "ConvBwdFilter"}
    if not os.path.exists(a.plan_file):
        model, batch, dtype, fmt, train = _model(a.model)
        arch = MODELS[a.model][0]
        cap = ce.capture(ce.ModelSpec.create(
            "benchmarks.cold_start:decoder" if arch == "decoder" else arch, batch=batch,
            amp={torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype],
            channels_last=fmt == torch.channels_last, train=train))
        entries = []
        for up in cap.problems:
            for d in up.directions:
                search = native.engine_search(d, native_problem(up.problem,
                                                                make_tensors(up.problem, d)))
                for name in search.heuristics("A"):
                    t = parse_tag(f"{prefix[d]}_{name}")
                    if search.build(t.engine, list(t.knobs)).status == "built":
                        entries.append(PlanEntry(
                            key=PlanKey.of(up.problem, d, False), problem=up.problem,
                            tag=f"{prefix[d]}_{name}", engine=t.engine,
                            knobs=[list(k) for k in t.knobs], numeric_notes=[],
                            why="cuDNN heuristic mode A's first config that builds"))
                        break
        env = environment(torch.cuda.current_device())
        plans = PlanFile(environment=PlanEnvironment.of(env), entries=entries,
                         source=a.plan_file)
        with open(a.plan_file, "w") as f:
            f.write(plans.to_json())
        del model
    model, *_ = _model(a.model)
    ce.pin(model, a.plan_file, ahead=True, keep=a.kept)
    ce.wait_for_plans()
    return 0


def call_child(a) -> int:
    """One mode's process of ``--first-calls``: the first forward and backward call of the
    convolution (ms, synchronised), after a tiny convolution loaded cuDNN, to ``--out``."""
    import torch

    torch.backends.cudnn.benchmark = a.child == "benchmark"
    torch.backends.cudnn.deterministic = a.child == "deterministic"
    dtype = getattr(torch, a.dtype)
    tiny = torch.ones(1, 1, 4, 4, device="cuda")
    torch.nn.functional.conv2d(tiny, torch.ones(1, 1, 1, 1, device="cuda"))
    shape = [int(s) for s in a.shape.split(",")]
    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(a.out_channels, shape[1], a.kernel, a.kernel, device="cuda", dtype=dtype,
                    requires_grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y = torch.nn.functional.conv2d(x, w, padding=a.kernel // 2)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    y.backward(torch.ones_like(y))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    with open(a.out, "w") as f:
        json.dump({"fwd_ms": (t1 - t0) * 1e3, "bwd_ms": (t2 - t1) * 1e3}, f)
    return 0


def call_cases(a) -> list:
    """``--first-calls``: per row (each process its own empty JIT cache, or one shared by a
    repeat's processes) every cuDNN mode's process."""
    args = ["--first-calls", "--shape", a.shape, "--kernel", str(a.kernel), "--out-channels",
            str(a.out_channels), "--dtype", a.dtype, "--out", "{out}"]
    return [Case(row, m, harness.module_argv(__spec__.name, "--child", m, *args),
                 env=(("CUDA_CACHE_PATH", cache),))
            for row, cache in (("empty cache", "{tmp}"), ("shared cache", "{round}"))
            for m in CALL_MODES]


def cases(a, places) -> list:
    out = []
    for name in a.models:
        plans, kept = places[name]
        args = ("--model", name, "--plan-file", plans, "--kept", kept, "--out", "{out}")
        cache = "{round}" if a.warm_jit else "{tmp}"
        for mode in MODES + ((PROFILED,) if a.profile else ()):
            out.append(Case(name, mode, harness.module_argv(__spec__.name, "--child", mode,
                                                            *args),
                            env=(("CUDA_CACHE_PATH", cache),),
                            timeout_s=600))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, JSON, repeats=3)
    ap.set_defaults(json=None)  # the models' JSON, or with --first-calls CALLS_JSON
    ap.add_argument("--models", help=f"comma-separated, of: {', '.join(MODELS)} (default: all)")
    ap.add_argument("--plans", action="append", default=[], metavar="NAME=FILE",
                    help="a plan file for a model (default: cuDNN's heuristic configs)")
    ap.add_argument("--warm-jit", action="store_true",
                    help="one CUDA JIT cache per repeat, shared by its processes")
    ap.add_argument("--profile", action="store_true",
                    help=f"one more process per model, '{PROFILED}': its first step's host "
                         "time split by CUDA calls (launches, allocations, synchronisations)")
    ap.add_argument("--first-calls", action="store_true",
                    help="one convolution's first calls per cuDNN mode instead of the models "
                         f"(result by default to {CALLS_JSON})")
    for flag, dest in CALLS_ONLY:
        ap.add_argument(flag, type=type(CALL_DEFAULTS[dest]),
                        choices=("float32", "float16", "bfloat16") if dest == "dtype" else None,
                        help=f"--first-calls: default {CALL_DEFAULTS[dest]}")
    harness.child_args(ap, MODES + (PROFILED,) + CALL_MODES)
    ap.add_argument("--setup", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--model", "--kept", "--plan-file"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    other = [flag for flag, dest in (MODELS_ONLY if a.first_calls else CALLS_ONLY)
             if getattr(a, dest) != ap.get_default(dest)]
    if other:
        ap.error(f"{', '.join(other)}: {'not' if a.first_calls else 'only'} with --first-calls")
    if a.json is None:
        a.json = CALLS_JSON if a.first_calls else JSON
    if a.first_calls:
        for dest, value in CALL_DEFAULTS.items():
            if getattr(a, dest) is None:
                setattr(a, dest, value)
        return a
    a.models = harness.listed(ap, a.models or ",".join(DEFAULT), "--models", MODELS)
    given = dict(p.split("=", 1) for p in a.plans if "=" in p)
    if a.child is None and not a.setup:
        a.given = given
    return a


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.child:
        return call_child(a) if a.first_calls else child(a)
    if a.setup:
        return setup(a)
    if a.first_calls:
        problem = (f"problem: --shape {a.shape} --kernel {a.kernel} --out-channels "
                   f"{a.out_channels} --dtype {a.dtype}")
        return CALLS.run(call_cases(a), a, runner, env, notes=[problem])
    import subprocess

    work = tempfile.mkdtemp(prefix="cold_start_")
    places = {}
    for name in a.models:
        plans = a.given.get(name) or os.path.join(work, f"{name}.plans.json")
        kept = os.path.join(work, f"{name}.kept")
        rc = subprocess.run([sys.executable, "-m", __spec__.name, "--setup", "--model", name,
                             "--plan-file", plans, "--kept", kept],
                            stdout=sys.stderr).returncode
        if rc != 0:
            print(f"cold_start: the setup of {name} failed (exit {rc})", file=sys.stderr)
            return 1
        places[name] = (plans, kept)
    notes = ["plans: " + ("as given" if a.given else "cuDNN's first heuristic config (mode A) "
                          "that builds, per problem-direction"),
             "JIT cache: " + ("shared per repeat" if a.warm_jit else "empty in every process")]
    return BENCH.run(cases(a, places), a, runner, env, notes=notes)


if __name__ == "__main__":
    sys.exit(main())
