"""The one harness every benchmark runs on.

A benchmark is a list of :class:`Case` (a row, a mode and the command that measures it).
:func:`measure` runs every case in a fresh process (``sys.executable`` and the case's
arguments), all cases once per repeat, in turns (the order reversed every other repeat,
so that drift over the run reaches every mode alike), and collects each run's figures:
its wall time, its exit status, and what the run wrote to its ``{out}`` file (a JSON
object of numbers). :func:`result` turns the samples into one JSON document: per row,
mode and figure the samples, the median and the spread, the ratios of each mode to the
baseline mode, and the environment the numbers were measured in (:func:`environment`).
render.py draws the table from that document alone.

Every measured process imports this package and the benchmarks from bytecode, as a
package installed by pip does (pip compiles it at install): :func:`compile_sources` writes
it once before the first run, where PYTHONDONTWRITEBYTECODE would leave each process
compiling the sources it imports (about 30 ms of a pinned process's start on this
project's CPU machine).

A case's arguments and environment may hold ``{out}`` (a fresh file per run, read back
as the run's figures), ``{tmp}`` (a fresh empty folder per run: e.g. an empty CUDA JIT
cache) and ``{round}`` (a fresh empty folder per repeat, shared by that repeat's runs).
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

SCHEMA = "cudnn_explorer.benchmark"
SCHEMA_VERSION = 1
NOISY = 0.10  # spread / median above this: the cell is marked noisy (torch.utils.benchmark)


@dataclass(frozen=True)
class Case:
    """One cell of the table: ``row`` and ``mode`` name it, ``argv`` (after
    ``sys.executable``) and ``env`` (added to this process's) measure it."""

    row: str
    mode: str
    argv: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()
    timeout_s: float = 3600.0
    # the run's figures from its {out} file (default: a JSON object, its numbers), given
    # the file's path and the run's wall time; values that are not numbers stay out of
    # the table but reach the benchmark (pairing runs of two modes)
    read: Optional[Callable[[str, float], dict]] = None
    watch_memory: bool = False  # sample the GPU's used memory: figure gpu_peak_gib


@dataclass(frozen=True)
class Figure:
    """A figure a run reports: its key in the run's figures, what the table calls it, and
    its unit."""

    key: str
    label: str
    unit: str
    better: str = "lower"  # "lower", "higher" or "" (the best mode is marked where given)


Runner = Callable[[Case, Dict[str, str]], Dict[str, float]]


def _filled(text: str, places: Dict[str, str]) -> str:
    for name, value in places.items():
        text = text.replace("{" + name + "}", value)
    return text


def run_process(case: Case, places: Dict[str, str]) -> Dict[str, float]:
    """Run ``case`` in a fresh process (its output passed through to stderr). Returns its
    figures: ``wall_s`` (seconds from the start of the process to its end), ``rc`` (its
    exit status) and what it wrote to ``{out}``, a JSON object of numbers."""
    argv = [sys.executable] + [_filled(a, places) for a in case.argv]
    env = dict(os.environ)
    env.update({k: _filled(v, places) for k, v in case.env})
    print("$ " + " ".join(argv[1:]), file=sys.stderr, flush=True)
    watcher = MemoryWatch(visible_index()) if case.watch_memory else None
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(argv, env=env, stdout=sys.stderr, timeout=case.timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    figures = {"wall_s": time.perf_counter() - t0, "rc": float(rc)}
    if watcher is not None:
        figures.update(watcher.stop())
    out = places.get("out")
    if out and os.path.exists(out) and os.path.getsize(out):
        figures.update((case.read or read_numbers)(out, figures["wall_s"]))
    return figures


def read_numbers(path: str, wall_s: float) -> dict:
    """A run's {out} file as figures: the numbers of its JSON object."""
    with open(path) as f:
        return {k: float(v) for k, v in json.load(f).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}


def used_mib(index: int) -> Optional[float]:
    """The GPU's used memory (MiB) as nvidia-smi says it, read from outside any CUDA
    context; None without nvidia-smi."""
    try:
        r = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.used",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        return float(r.stdout.split()[0]) if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class MemoryWatch:
    """The GPU's used memory sampled from a thread while a run goes on: its peak above
    what was used when the run started (GiB)."""

    def __init__(self, index: int, every_s: float = 0.1):
        import threading

        self.index, self.every_s = index, every_s
        self.base = used_mib(index)
        self.peak = self.base
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.done.wait(self.every_s):
            v = used_mib(self.index)
            if v is not None and (self.peak is None or v > self.peak):
                self.peak = v

    def stop(self) -> dict:
        self.done.set()
        self.thread.join()
        if self.base is None or self.peak is None:
            return {}
        return {"gpu_peak_gib": (self.peak - self.base) / 1024}


def visible_index() -> int:
    """nvidia-smi's index of the first GPU this process may use (CUDA_VISIBLE_DEVICES)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def measure(cases: Sequence[Case], repeats: int = 1, runner: Runner = run_process,
            warmup: int = 0, samples: Optional[dict] = None
            ) -> Dict[Tuple[str, str], List[Dict[str, float]]]:
    """Run every case ``repeats`` times, all cases in turn each repeat (reversed every
    other repeat), each run in its own process with fresh ``{out}`` / ``{tmp}`` places,
    after ``warmup`` rounds of the same whose figures are dropped. Returns per (row, mode)
    each counted run's figures and its ``repeat`` (from 0), in the order they ran; they
    go into ``samples`` as each run ends, where given (an interrupted caller keeps the
    runs that finished)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats {repeats}, warmup {warmup}: valid: 1 or more, 0 or more")
    if samples is None:
        samples = {}
    for c in cases:
        samples[(c.row, c.mode)] = []
    for r in range(-warmup, repeats):
        order = list(cases) if r % 2 == 0 else list(reversed(cases))
        shared = tempfile.mkdtemp(prefix="bench_round_")
        try:
            for case in order:
                tmp = tempfile.mkdtemp(prefix="bench_run_")
                places = {"out": os.path.join(tmp, "figures.json"),
                          "tmp": os.path.join(tmp, "scratch"), "round": shared}
                os.makedirs(places["tmp"])
                try:
                    figures = runner(case, places)
                    if r >= 0:  # with its repeat, to pair it with the baseline's (ratios)
                        samples[(case.row, case.mode)].append(dict(figures, repeat=r))
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    return samples


def spread(values: Sequence[float]) -> Optional[float]:
    """The spread of ``values`` relative to their median: the interquartile range over
    the median from 4 values on, the range over the median below that; None for one
    value or a median of 0."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    if med == 0:
        return None
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return (q3 - q1) / abs(med)
    return (max(values) - min(values)) / abs(med)


def cells(samples, figures: Sequence[Figure]) -> List[dict]:
    """Per (row, mode) and figure: the samples, their median and spread. A figure a
    run did not report is left out of that cell's samples; a cell with none is left out."""
    out = []
    for (row, mode), runs in samples.items():
        for fig in figures:
            had = [run for run in runs if fig.key in run]
            if had:
                values = [run[fig.key] for run in had]
                cell = {"row": row, "mode": mode, "figure": fig.key, "samples": values,
                        "median": statistics.median(values), "spread": spread(values)}
                if all("repeat" in run for run in had):
                    cell["repeats"] = [run["repeat"] for run in had]
                out.append(cell)
    return out


def ratios(cell_list: Sequence[dict], baseline: Optional[str]) -> List[dict]:
    """Each mode's median over the baseline mode's, per row and figure; and where both
    ran in two repeats or more, ``paired``: the least and the greatest of the repeats'
    own ratios (a run over the baseline's run of the same repeat, which ran beside it),
    the spread of the ratio itself where processes differ from one another."""
    if baseline is None:
        return []
    base = {(c["row"], c["figure"]): c for c in cell_list if c["mode"] == baseline}
    out = []
    for c in cell_list:
        b = base.get((c["row"], c["figure"]))
        if c["mode"] == baseline or not b or not b["median"]:
            continue
        r = {"row": c["row"], "figure": c["figure"], "mode": c["mode"], "baseline": baseline,
             "ratio": c["median"] / b["median"]}
        by_repeat = dict(zip(b.get("repeats", ()), b["samples"]))
        paired = [v / by_repeat[i] for i, v in zip(c.get("repeats", ()), c["samples"])
                  if by_repeat.get(i)]
        if len(paired) >= 2:
            r["paired"] = [min(paired), max(paired)]
        out.append(r)
    return out


def git_commit(root: str) -> str:
    """The commit checked out at ``root`` (with "+changes" where the tree differs from
    it), or "" where there is no git or no repository."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def driver_version() -> str:
    """The NVIDIA driver's version as nvidia-smi says it, or "" without one."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""


INFO_CODE = "import json, cudnn_explorer as ce; print(json.dumps(ce.info()))"


def compile_sources(folders: Optional[Sequence[str]] = None) -> None:
    """Compiles the sources in ``folders`` (default: the package's and the benchmarks')
    to bytecode (__pycache__, where it is older than its source), as pip's install does;
    what cannot be written is left to compile in each process (compileall says nothing
    with quiet=2)."""
    import compileall

    import cudnn_explorer

    if folders is None:
        folders = (os.path.dirname(os.path.abspath(cudnn_explorer.__file__)),
                   os.path.dirname(os.path.abspath(__file__)))
    for folder in folders:
        compileall.compile_dir(folder, quiet=2)


def environment(device_info: Optional[dict] = None) -> dict:
    """Where the numbers were measured: the GPU, the driver, torch, cuDNN and
    cudnn-frontend (the package's own ``info()``, run in a process of its own so that
    this one holds no CUDA context), the package's version, the git commit, the command
    line and the date. ``device_info`` replaces that process's answer (tests)."""
    import cudnn_explorer

    if device_info is None:
        r = subprocess.run([sys.executable, "-c", INFO_CODE], capture_output=True, text=True,
                           timeout=300)
        device_info = json.loads(r.stdout) if r.returncode == 0 else {"gpus": []}
    running, built = device_info.get("running", {}), device_info.get("built", {})
    gpus = device_info.get("gpus", [])
    return {"gpu": ", ".join(sorted({g["name"] for g in gpus})), "gpus": len(gpus),
            "driver": driver_version(), "torch": running.get("torch", ""),
            "cudnn": cudnn_text(running.get("cudnn", "")),
            "cudnn_frontend": cudnn_text(built.get("cudnn_frontend", "")),
            "package": cudnn_explorer.__version__,
            "commit": git_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            "command": "python -m " + " ".join([module_name()] + sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def module_name() -> str:
    """The benchmark's module as ``python -m`` names it."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else os.path.basename(sys.argv[0])


def cudnn_text(version: str) -> str:
    """A cuDNN-style integer version as text: 91900 -> 9.19.0, 13200 -> 1.32.0 (the
    frontend's); anything else as it is."""
    if not version.isdigit():
        return version
    v = int(version)
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def result(benchmark: str, question: str, samples, figures: Sequence[Figure],
           baseline: Optional[str] = None, env: Optional[dict] = None,
           notes: Sequence[str] = ()) -> dict:
    """The JSON document of one benchmark run (render.py draws its table)."""
    cell_list = cells(samples, figures)
    modes = list(dict.fromkeys(mode for _, mode in samples))
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "benchmark": benchmark,
            "question": question, "environment": environment() if env is None else env,
            "repeats": max((len(v) for v in samples.values()), default=0),
            "rows": list(dict.fromkeys(row for row, _ in samples)), "modes": modes,
            "baseline": baseline,
            "figures": [{"key": f.key, "label": f.label, "unit": f.unit, "better": f.better}
                        for f in figures],
            "cells": cell_list, "ratios": ratios(cell_list, baseline), "notes": list(notes)}


def failed(samples) -> List[str]:
    """The (row, mode) cells with a run whose exit status was not 0, as text."""
    return [f"{row} / {mode}" for (row, mode), runs in samples.items()
            if any(run.get("rc", 0) != 0 for run in runs)]


def write(doc: dict, path: str) -> None:
    """Write ``doc`` to ``path`` (a temporary file renamed, so a reader never sees half)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def common_args(parser, default_json: str, repeats: int) -> None:
    """The options every benchmark has: where its JSON goes and how many repeats."""
    parser.add_argument("--json", default=default_json,
                        help=f"write the result here (default {default_json})")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"runs of every case, in turns (default {repeats})")


def listed(parser, text: str, flag: str, valid) -> List[str]:
    """A comma-separated option's items, each one of ``valid``; otherwise the parser's
    one-line error (exit 2) naming the bad items and the valid ones."""
    items = [v for v in text.split(",") if v]
    bad = [v for v in items if v not in valid]
    if bad or not items:
        parser.error(f"{flag} {','.join(bad) or repr(text)}: valid: {', '.join(valid)}")
    return items


def child_args(parser, choices) -> None:
    """The hidden options a benchmark's own child processes take: which mode it is
    (``--child``) and where its figures go (``--out``)."""
    parser.add_argument("--child", choices=list(choices), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its name (its results file's ``benchmark``), the question it
    answers, the figures its runs report and the mode the others are compared with."""

    name: str
    question: str
    figures: Sequence[Figure]
    baseline: Optional[str] = None

    def run(self, cases: Sequence[Case], a, runner: Runner = run_process,
            env: Optional[dict] = None, warmup: int = 0, notes: Sequence[str] = (),
            after: Optional[Callable] = None) -> int:
        """Measure ``cases`` (``a``: the parsed options, ``--repeats`` and ``--json``),
        hand the samples to ``after`` where given, write the result and print its table;
        the exit status of finish(). The environment (``env``, else environment()) is
        read before the first run, so that a Ctrl-C or a deadline's SIGINT at any moment
        of the measuring keeps every run that finished."""
        try:
            if runner is run_process:  # the measured processes import from bytecode
                compile_sources()
            if env is None:
                env = environment()
        except KeyboardInterrupt:
            print(f"{self.name}: interrupted before the first run; nothing written",
                  file=sys.stderr)
            return 130
        samples: dict = {}
        notes, interrupted = list(notes), False
        try:
            measure(cases, a.repeats, runner, warmup=warmup, samples=samples)
        except KeyboardInterrupt:  # the runs that finished are kept, the result says so
            done = sum(len(v) for v in samples.values())
            print(f"{self.name}: interrupted; {done} of {len(cases) * a.repeats} runs "
                  "finished, written", file=sys.stderr)
            notes.append(f"interrupted: {done} of {len(cases) * a.repeats} runs finished")
            interrupted = True
        if after is not None:
            after(samples)
        doc = result(self.name, self.question, samples, self.figures, baseline=self.baseline,
                     env=env, notes=notes)
        if interrupted:
            finish(dict(doc, complete=False), a.json, samples)
            return 130
        return finish(doc, a.json, samples)


def finish(doc: dict, path: str, samples) -> int:
    """Write the result, print its table; 1 where a run failed, else 0."""
    from .render import render

    write(doc, path)
    print(render(doc))
    bad = failed(samples)
    if bad:
        print("failed runs: " + "; ".join(bad), file=sys.stderr)
    return 1 if bad else 0


def module_argv(module: str, *args: str) -> Tuple[str, ...]:
    """``-m module args...`` for a Case."""
    return ("-m", module) + tuple(args)


__all__ = ["Benchmark", "Case", "Figure", "child_args", "listed", "measure", "run_process",
           "result", "environment", "spread", "write", "finish", "common_args", "module_argv",
           "cudnn_text", "failed"]
