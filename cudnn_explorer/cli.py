"""Command line: ``python -m cudnn_explorer --shape 32,3,224,224 --kernel 3``.

Results go to stdout (tables, or --json / --csv); errors are one line on stderr with a
non-zero exit code (2: bad input or a problem cuDNN cannot run; 3: missing GPU,
driver, extension or memory; 1: anything unexpected). --debug shows tracebacks.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import tempfile
import time
from typing import List, Optional

from .core.errors import ExplorerError, MissingDependencyError, UserError
from .core.files import read_bytes
from .core.options import ExploreOptions
from .core.problem import ConvProblem
from .core.exploration import Exploration

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as one line (exit 2), not usage + error."""

    def error(self, message):
        raise UserError(message)


# What a flag would be ignored with: (flags given, the flags they make pointless).
PROBLEM_FLAGS = ("--shape", "--out-channels", "--kernel", "--stride", "--padding", "--dilation",
                 "--groups", "--dtype", "--tf32", "--layout")
RUN_FLAGS = ("--direction", "--device", "--max-workspace", "--seed", "--budget-ms",
             "--flush-l2", "--no-retime", "--no-graph", "--no-check", "--quiet", "--verbose",
             "--no-pytorch", "--benchmark-limit", "--child-timeout", "--no-engines",
             "--engine-configs", "--engine-config-timeout", "--engine-budget-s", "--store",
             "--no-store", "--refresh")
CONFLICTS = [
    ("--load", PROBLEM_FLAGS + RUN_FLAGS + ("--info",), "--load renders a saved file"),
    ("--info", PROBLEM_FLAGS + tuple(f for f in RUN_FLAGS if f != "--device")
     + ("--json", "--csv", "--engines"), "--info only prints versions and GPUs"),
    ("--quiet", ("--verbose",), "--quiet turns progress off"),
    ("--no-pytorch", ("--benchmark-limit", "--child-timeout"),
     "--no-pytorch runs none of PyTorch's modes"),
    ("--no-engines", ("--engine-configs", "--engine-config-timeout", "--engine-budget-s"),
     "--no-engines explores no engine configs"),
    ("--no-retime", ("--budget-ms", "--flush-l2", "--no-graph"), "--no-retime times nothing"),
    ("--no-store", ("--store", "--refresh"), "--no-store uses no store"),
    ("--target", tuple(f for f in RUN_FLAGS
                       if f not in ("--direction", "--benchmark-limit", "--store", "--no-store"))
     + ("--csv", "--load", "--info", "--engines", "--dump-device-profile"),
     "--target ranks heuristics for other GPUs and measures nothing"),
    ("--dump-device-profile", PROBLEM_FLAGS + tuple(f for f in RUN_FLAGS if f != "--device")
     + ("--json", "--csv", "--load", "--info", "--engines"),
     "--dump-device-profile only writes this GPU's profile"),
]


def given_flags(parser: argparse.ArgumentParser, argv: List[str]) -> List[str]:
    """The long flags on the command line, as the parser names them (``--x=v`` too)."""
    known = parser._option_string_actions  # argparse's own table of flags
    return [t.split("=", 1)[0] for t in argv
            if t.startswith("--") and t.split("=", 1)[0] in known]


def check_conflicts(flags: List[str]) -> None:
    """UserError naming a flag that another given flag would make the run ignore."""
    for flag, ignored, why in CONFLICTS:
        if flag in flags:
            bad = next((f for f in flags if f in ignored), None)
            if bad:
                raise UserError(f"{bad} would be ignored: {why}; drop {bad} or {flag}")


def join_negative_values(parser: argparse.ArgumentParser, argv: List[str]) -> List[str]:
    """``--shape -1,3,8,8`` as ``--shape=-1,3,8,8``: argparse takes a value that starts
    with '-' for a flag and reports the wrong thing ("expected one argument"); joined,
    the value reaches validation, which names what is wrong with it."""
    known = parser._option_string_actions
    out, i = [], 0
    while i < len(argv):
        t = argv[i]
        action = known.get(t)
        if (action is not None and action.nargs is None and i + 1 < len(argv)
                and argv[i + 1].startswith("-") and argv[i + 1] not in known
                and not argv[i + 1].startswith("--")):
            out.append(f"{t}={argv[i + 1]}")
            i += 2
            continue
        out.append(t)
        i += 1
    return out


def add_run_args(p: argparse.ArgumentParser):
    """The run, measurement, PyTorch and engine-config options, shared by the problem
    command and ``model`` (one ExploreOptions for both); returns the "run" group."""
    r = p.add_argument_group("run")
    r.add_argument("--device", default="0", help="CUDA device index (default 0)")
    r.add_argument("--max-workspace", default=None, metavar="MiB",
                   help="cap the workspace Find may use, in MiB")
    r.add_argument("--seed", default="0", help="seed of the random input data")
    m = p.add_argument_group("measurement")
    m.add_argument("--budget-ms", default="100",
                   help="GPU sampling time per re-timed row, in ms (default 100)")
    m.add_argument("--flush-l2", action="store_true",
                   help="clear the L2 cache before every timed launch")
    m.add_argument("--no-retime", action="store_true",
                   help="skip steady-state re-timing (show cudnnFind's own times only)")
    m.add_argument("--no-graph", action="store_true",
                   help="time eager back-to-back launches instead of CUDA-graph replays")
    m.add_argument("--no-check", action="store_true",
                   help="skip checking each algorithm's output against a float64 reference")
    m.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    m.add_argument("--verbose", action="store_true",
                   help="progress as plain lines on stderr, also when it is not a terminal")
    t = p.add_argument_group("PyTorch's own choice (each mode in a fresh child process)")
    t.add_argument("--no-pytorch", action="store_true",
                   help="skip running PyTorch's own convolution in each mode")
    t.add_argument("--benchmark-limit", default=None, metavar="N",
                   help="torch.backends.cudnn.benchmark_limit for benchmark mode "
                        "(default: PyTorch's, 10; 0 = time every candidate)")
    t.add_argument("--child-timeout", default="300", metavar="S",
                   help="seconds before a PyTorch child process is declared hung")
    e = p.add_argument_group(
        "cuDNN 9 engine configs (explored by default when the extension was built with "
        "cudnn-frontend; the output ends with a per-direction summary)")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--engines", action="store_true",
                   help="also list every engine config tried, with its notes, workspace, "
                        "build time and heuristic ranks (with --load: from the saved file)")
    g.add_argument("--no-engines", action="store_true",
                   help="skip the engine configs (legacy algorithms and PyTorch's pick only)")
    e.add_argument("--engine-configs", default="8", metavar="N",
                   help="at most N valid knob configs per engine (default 8; up to 16*N "
                        "candidates are tried, most are invalid for a given problem)")
    e.add_argument("--engine-config-timeout", default="60", metavar="S",
                   help="seconds one config may take (build, timing, check) before it is "
                        "recorded as hung and its worker process restarted (default 60)")
    e.add_argument("--engine-budget-s", default="120", metavar="S",
                   help="time budget per direction for building and timing configs "
                        "(default 120)")
    st = p.add_argument_group("results store (SQLite; a repeat answers from it)")
    st.add_argument("--store", default=None, metavar="PATH",
                    help="the store file (default ~/.cache/cudnn_explorer/results.db)")
    st.add_argument("--no-store", action="store_true", help="neither read nor save results")
    st.add_argument("--refresh", action="store_true",
                    help="measure again even when the store has the answer (and save it)")
    return r


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m cudnn_explorer", allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List every cuDNN convolution algorithm for a problem, with cuDNN's own\n"
                    "time (ms), workspace (MiB), math type and determinism.",
        epilog="commands (each has --help):\n"
               "  model NAME     every convolution of a model, explored; PyTorch's own run "
               "of it\n"
               "  advise NAME    should benchmark mode be on for this workload?\n"
               "  compare        results side by side across GPUs and versions\n"
               "  history        what the results store holds\n"
               "  export         the store as JSON or CSV\n"
               "  plot KIND FILE pareto, roofline or gaps, as PNG and SVG")
    g = p.add_argument_group("problem")
    g.add_argument("--shape", help="input N,C,L (1-D), N,C,H,W (2-D) or N,C,D,H,W (3-D)")
    g.add_argument("--out-channels", default="64", help="output channels (default 64)")
    g.add_argument("--kernel", default="3", help="kernel size: one int or one per spatial dim")
    g.add_argument("--stride", default="1", help="one int or one per spatial dim (default 1)")
    g.add_argument("--padding", default=None,
                   help="one int or one per spatial dim (default kernel//2 per dim)")
    g.add_argument("--dilation", default="1", help="one int or one per spatial dim")
    g.add_argument("--groups", default="1", help="groups (= C for depthwise)")
    g.add_argument("--dtype", default="float32", help="float32, float16, bfloat16, float64")
    g.add_argument("--tf32", default=None,
                   help="on|off, float32 only (default on, like torch.backends.cudnn.allow_tf32)")
    g.add_argument("--layout", default="nchw", help="nchw | nhwc (channels_last)")
    add_run_args(p).add_argument("--direction", default="all",
                                 help="fwd | bwd-data | bwd-filter | all")
    o = p.add_argument_group("output")
    o.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write JSON (schema cudnn_explorer.exploration) to PATH or stdout")
    o.add_argument("--csv", nargs="?", const="-", default=None, metavar="PATH",
                   help="write CSV, one row per algorithm, to PATH or stdout")
    o.add_argument("--load", metavar="PATH",
                   help="render a saved --json file instead of running (no GPU needed)")
    o.add_argument("--target", metavar="GPUS",
                   help="no measurement: cuDNN's heuristic ranking for other GPUs from their "
                        "device profiles (e.g. a100,l4,v100,b200, or a profile file; "
                        "'list' lists them); needs no GPU")
    o.add_argument("--dump-device-profile", metavar="PATH",
                   help="write this GPU's cuDNN device profile (JSON) to PATH, for --target")
    o.add_argument("--info", action="store_true",
                   help="print build-time and running torch/CUDA/cuDNN versions and GPUs")
    o.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    o.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def _int(text: str, option: str, lo: int = 0) -> int:
    try:
        if not re.fullmatch(r"\s*[+-]?[0-9]{1,30}\s*", str(text)):
            raise ValueError(text)
        v = int(str(text).strip())
    except ValueError:
        raise UserError(f"{option} '{text}': not an integer") from None
    if v < lo:
        raise UserError(f"{option} {v}: must be >= {lo}")
    return v


def _tf32(text: Optional[str]) -> Optional[bool]:
    if text is None:
        return None
    t = str(text).strip().lower()
    if t in ("on", "1", "true", "yes"):
        return True
    if t in ("off", "0", "false", "no"):
        return False
    raise UserError(f"--tf32 '{text}': valid: on, off")


def options_from_args(a, engines: bool) -> ExploreOptions:
    """The one ExploreOptions of a command line (errors name the flag)."""
    return ExploreOptions.create(
        source="cli", directions=a.direction, device=a.device, seed=a.seed,
        max_workspace_mib=a.max_workspace, retime=not a.no_retime, budget_ms=a.budget_ms,
        flush_l2=a.flush_l2, graph=not a.no_graph, check=not a.no_check,
        pytorch=not a.no_pytorch, benchmark_limit=a.benchmark_limit,
        child_timeout_s=a.child_timeout, engines=engines, engine_configs=a.engine_configs,
        engine_budget_s=a.engine_budget_s, engine_config_timeout_s=a.engine_config_timeout)


def problem_from_args(a) -> ConvProblem:
    if a.shape is None:
        raise UserError("--shape is required, e.g. --shape 32,3,224,224 (or use --info / --load); "
                        "--help lists every option")
    return ConvProblem.create(a.shape, out_channels=a.out_channels, kernel=a.kernel,
                              stride=a.stride, padding=a.padding, dilation=a.dilation,
                              groups=a.groups, dtype=a.dtype, layout=a.layout, tf32=_tf32(a.tf32))


def check_output_path(path: Optional[str], flag: str) -> None:
    """UserError, before anything is measured, when ``path`` cannot be written."""
    if path in (None, "-"):
        return
    where = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} '{path}': is a directory")
    if not os.path.isdir(where):
        raise UserError(f"{flag} '{path}': directory '{where}' does not exist")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UserError(f"{flag} '{path}': not a regular file")
    try:  # the very way write_output writes: a temporary file beside it
        fd, tmp = tempfile.mkstemp(prefix=".cudnn_explorer.", dir=where)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UserError(f"{flag} '{path}': cannot write there: {e.strerror}") from None


def write_output(text: str, path: Optional[str], flag: str, quiet: bool = False) -> None:
    """``text`` to stdout ("-" or None) or to ``path`` atomically: a temporary file in the
    same directory, then a rename, so a reader never sees half a file. A path ending in
    .gz is written gzip-compressed (every reader of saved files takes either)."""
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    where = os.path.dirname(os.path.abspath(path))
    data = text.encode("utf-8")
    if path.endswith(".gz"):  # mtime 0: the same result gives the same bytes
        data = gzip.compress(data, compresslevel=9, mtime=0)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cudnn_explorer.", dir=where)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise UserError(f"{flag} '{path}': cannot write: {e.strerror}") from None
    if not quiet:
        print(f"wrote {path}", file=sys.stderr)


def _measure_layer():
    """The measuring layer (imports torch lazily): exit 3 with the fix when torch or
    numpy is missing."""
    try:
        from .measure import pipeline
    except ImportError as e:
        raise MissingDependencyError(
            f"{e.name or 'a dependency'} is not installed: run scripts/setup.sh, or pip "
            f"install torch numpy tabulate in this environment") from None
    return pipeline


def _kind_hint(data: bytes) -> str:
    """" (<what the file is and what reads it>)" for a saved file of another kind than an
    exploration, else ""."""
    import json

    from .core.advice import ADVICE_SCHEMA
    from .core.capture import CAPTURE_SCHEMA
    from .core.sweep import SWEEP_SCHEMA

    other_kinds = {
        SWEEP_SCHEMA: "a model sweep: render it with 'model --load FILE', plot it with "
                      "'plot gaps FILE', compare it with 'compare --file FILE'",
        ADVICE_SCHEMA: "an advice: render it with 'advise --load FILE'",
        CAPTURE_SCHEMA: "a model's capture: its problems, not measured",
    }
    try:
        schema = json.loads(data).get("schema")
    except (ValueError, RecursionError, AttributeError):
        return ""
    hint = other_kinds.get(schema) if isinstance(schema, str) else None
    return f" ({hint})" if hint else ""


def load_file(path: str, flag: str = "--load"):
    """The Exploration saved at ``path``; UserError naming the file and the bad field."""
    data = read_bytes(path, flag)
    try:
        return Exploration.from_json(data)
    except UserError as e:
        raise UserError(f"{flag} '{path}': {e}{_kind_hint(data)}") from None


def _without_store(e) -> None:
    print(f"cudnn_explorer: warning: {e}; going on without the store", file=sys.stderr)


def open_store(a):
    """The results store the flags ask for, or None: --no-store, or a store that cannot
    be used (one warning line naming the file; the run goes on without it)."""
    if getattr(a, "no_store", False):
        return None
    from .store.db import Store, StoreError, default_path

    try:
        return Store(a.store or default_path())
    except StoreError as e:
        _without_store(e)
        return None


def saver(store, problem, options):
    """on_direction for explore(): each finished direction into the store at once. A
    store that fails is dropped after one warning; the measurement goes on."""
    if store is None:
        return None
    from .store.db import StoreError

    state = {"ok": True}

    def save(env, measurement, d):
        if state["ok"]:
            try:
                store.save(problem, env, options, measurement, d)
            except StoreError as e:
                state["ok"] = False
                _without_store(e)
    return save


def _existing_store(path: Optional[str]) -> str:
    """The store file to read (``path``, else the default one); UserError when there is
    none yet (reading must not create it)."""
    from .store.db import default_path

    path = path or default_path()
    if not os.path.exists(path):
        raise UserError(f"--store '{path}': no such file (nothing measured yet)")
    return path


def _run_history(argv: List[str]) -> int:
    p = _Parser(prog="python -m cudnn_explorer history", allow_abbrev=False,
                description="The results in the store, newest first.")
    p.add_argument("--store", default=None, metavar="PATH")
    p.add_argument("--limit", default="50", help="at most this many rows (default 50)")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    from .report.format import table
    from .store.db import Store

    path = _existing_store(a.store)
    limit = _int(a.limit, "--limit", lo=1)
    with Store(path) as store:
        rows = store.history(limit)
        total = store.count()
        runs = store.model_runs(limit)
    print(f"results store '{path}': {total} stored directions")
    if rows:
        print(table([[r["created"][:19].replace("T", " "), r["gpu"], r["cudnn"], r["torch"],
                      r["directions"], r["problem"][:60]] for r in rows],
                    headers=["measured (UTC)", "GPU", "cuDNN", "torch", "directions",
                             "problem"]))
    if runs:
        print("\nPyTorch's own runs of models (one per mode):")
        print(table([[r["created"][:19].replace("T", " "), r["gpu"], r["mode"],
                      r["model"][:70]] for r in runs],
                    headers=["measured (UTC)", "GPU", "mode", "model"]))
    return 0


def _add_env_filters(p) -> None:
    """--gpu and --cudnn, which _env_selected applies."""
    p.add_argument("--gpu", action="append", default=[], metavar="TEXT",
                   help="only environments whose GPU name contains TEXT (repeatable)")
    p.add_argument("--cudnn", action="append", default=[], metavar="VERSION",
                   help="only these cuDNN versions, e.g. 9.19.0 or 91900 (repeatable)")


def _env_selected(a, env) -> bool:
    """Whether ``env`` passes --gpu (a part of the GPU name) and --cudnn (a version)."""
    from .report.format import fmt_version

    if a.gpu and not any(g.lower() in env.gpu_name.lower() for g in a.gpu):
        return False
    want = {c.strip() for c in a.cudnn}
    return not want or env.cudnn_runtime in want or fmt_version(env.cudnn_runtime) in want


EXPORT_SCHEMA = "cudnn_explorer.export"


def _saved_explorations(path: str, flag: str) -> list:
    """The explorations of a saved file: one result (--json), an export of many, or a
    model sweep (one per unique problem measured)."""
    import json

    from .core.sweep import SWEEP_SCHEMA, ModelSweep

    data = read_bytes(path, flag)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and doc.get("schema") == EXPORT_SCHEMA:
        try:
            return [Exploration.from_dict(e) for e in doc.get("explorations") or []]
        except UserError as e:
            raise UserError(f"{flag} '{path}': {e}") from None
    if isinstance(doc, dict) and doc.get("schema") == SWEEP_SCHEMA:
        try:
            sw = ModelSweep.from_dict(doc)
        except UserError as e:
            raise UserError(f"{flag} '{path}': {e}") from None
        return [e.exploration for e in sw.entries if e.exploration is not None]
    try:
        return [Exploration.from_json(data)]
    except UserError as e:
        raise UserError(f"{flag} '{path}': {e}") from None


def _run_export(argv: List[str]) -> int:
    p = _Parser(prog="python -m cudnn_explorer export", allow_abbrev=False,
                description="Write what the results store holds: --json (one file of every "
                            "stored exploration) and/or --csv (legacy rows, engine configs and "
                            "PyTorch's picks, told apart by the kind column).")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="the results store (default ~/.cache/cudnn_explorer/results.db)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the explorations here")
    p.add_argument("--csv", default=None, metavar="PATH", help="write their rows here")
    _add_env_filters(p)
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    if not a.json and not a.csv:
        raise UserError("export: give --json PATH and/or --csv PATH")
    check_output_path(a.json, "--json")
    check_output_path(a.csv, "--csv")
    import json

    from .report.export import rows_to_csv
    from .store.db import Store

    path = _existing_store(a.store)
    with Store(path) as store:  # StoreError: exit 3, naming the file
        exps = [e for e in store.explorations() if _env_selected(a, e.environment)]
    if not exps:
        raise UserError("export: nothing stored matches (widen --gpu / --cudnn)")
    if a.json:
        doc = {"schema": EXPORT_SCHEMA, "schema_version": 1, "store": os.path.abspath(path),
               "explorations": [e.to_dict() for e in exps]}
        write_output(json.dumps(doc, indent=1) + "\n", a.json, "--json")
    if a.csv:
        parts = [rows_to_csv(e) for e in exps]
        text = parts[0] + "".join(t.split("\n", 1)[1] for t in parts[1:])
        write_output(text, a.csv, "--csv")
    print(f"exported {len(exps)} stored explorations", file=sys.stderr)
    return 0


def _run_compare(argv: List[str]) -> int:
    p = _Parser(prog="python -m cudnn_explorer compare", allow_abbrev=False,
                description="Side by side across environments (GPUs, cuDNN, torch): what "
                            "each one's PyTorch picked, its best legacy algorithm and best "
                            "engine config, for every problem measured in two or more.")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="read the results store (default ~/.cache/cudnn_explorer/results.db)")
    p.add_argument("--no-store", action="store_true", help="only the --file results")
    p.add_argument("--file", action="append", default=[], metavar="PATH",
                   help="a saved --json result (one problem, an export, or a model "
                        "sweep); repeat for several")
    _add_env_filters(p)
    p.add_argument("--plot", default=None, metavar="PATH",
                   help="also a heatmap (PATH.png and PATH.svg): problems x environments, "
                        "colour = PyTorch's pick's time relative to the fastest environment's")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    if a.no_store and a.store:
        raise UserError("--store would be ignored: --no-store reads no store; drop one")
    if a.plot:
        base = os.path.splitext(a.plot)[0] if a.plot.lower().endswith((".png", ".svg")) \
            else a.plot
        for path in (base + ".png", base + ".svg", base + ".json"):
            check_output_path(path, "--plot")
    from .report.compare import render_compare
    from .store.db import Store, StoreError, default_path

    items = []
    if not a.no_store:
        path = a.store or default_path()
        if a.store and not os.path.exists(path):
            raise UserError(f"--store '{path}': no such file")
        if os.path.exists(path):
            try:
                with Store(path) as store:
                    items += [(pr, env, d) for pr, env, d, _ in store.results()]
            except StoreError as e:
                _without_store(e)
    for f in a.file:
        for exp in _saved_explorations(f, "--file"):
            items += [(exp.problem, exp.environment, d) for d in exp.directions]
    items = [x for x in items if _env_selected(a, x[1])]
    if not items:
        raise UserError("compare: no results (measure some, give --file, or widen --gpu / "
                        "--cudnn)")
    sys.stdout.write(render_compare(items))
    if a.plot:
        from .report import plots

        for path in plots.save(plots.environments(items), a.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _run(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "model":
        return _run_model(argv[1:])
    if argv and argv[0] == "history":
        return _run_history(argv[1:])
    if argv and argv[0] == "compare":
        return _run_compare(argv[1:])
    if argv and argv[0] == "advise":
        return _run_advise(argv[1:])
    if argv and argv[0] == "plot":
        return _run_plot(argv[1:])
    if argv and argv[0] == "export":
        return _run_export(argv[1:])
    if not argv:
        sys.stderr.write(parser.format_usage())
        raise UserError("nothing to do: give --shape (e.g. --shape 32,3,224,224 --kernel 3), "
                        "--load FILE or --info; --help lists every option")
    argv = join_negative_values(parser, argv)
    a = parser.parse_args(argv)
    if a.version:
        from .core.version import __version__

        print(f"cudnn_explorer {__version__}")
        return 0
    check_conflicts(given_flags(parser, argv))
    if a.json == "-" and a.csv == "-":
        raise UserError("--json - and --csv - both write to stdout, which would parse as "
                        "neither; write one of them to a file")
    check_output_path(a.json, "--json")
    check_output_path(a.csv, "--csv")
    from .report import export, tables

    if a.info:
        pipeline = _measure_layer()
        print(tables.render_info(pipeline.info(_int(a.device, "--device"))))
        return 0
    if a.dump_device_profile:
        check_output_path(a.dump_device_profile, "--dump-device-profile")
        _measure_layer()
        from .measure.targets import dump_profile

        text = dump_profile(_int(a.device, "--device"))
        write_output(text.rstrip("\n") + "\n", a.dump_device_profile, "--dump-device-profile")
        return 0
    if a.target:
        return _run_targets(a)
    if a.load:
        exp = load_file(a.load)
    else:
        problem = problem_from_args(a)
        options = options_from_args(a, engines=not a.no_engines)
        store = open_store(a)
        exp = None
        if store is not None and not a.refresh:  # before torch is imported: milliseconds
            exp = _stored(store, problem, options)
        if exp is None:
            exp = _measure(a, problem, options, store)

    try:
        # The table first whenever stdout is free, so a failed write loses nothing shown.
        if "-" not in (a.json, a.csv):
            sys.stdout.write(tables.render_exploration(exp, show_engines=a.engines))
        if a.json is not None:
            write_output(exp.to_json() + "\n", a.json, "--json")
        if a.csv is not None:
            write_output(export.rows_to_csv(exp), a.csv, "--csv")
    except (ArithmeticError, LookupError, TypeError, ValueError) as e:
        if not a.load or isinstance(e, ExplorerError) or a.debug:
            raise
        # Each field was checked on load; a combination of them can still be one that no
        # run writes. The file is at fault, not the machine: exit 2, naming it.
        raise UserError(f"--load '{a.load}': fields that do not fit together "
                        f"({type(e).__name__}: {str(e)[:80]})") from None
    if a.load:
        return 0
    unfinished = [d for d in exp.directions if d.error]
    if unfinished:  # what finished was shown and saved above
        kept = [d.direction for d in exp.directions if d.find]
        print(f"cudnn_explorer: error: {unfinished[0].direction}: {unfinished[0].error}"
              + (f" (and {len(unfinished) - 1} more direction(s))" if len(unfinished) > 1
                 else "")
              + (f"; results kept for {', '.join(kept)}" if kept else ""), file=sys.stderr)
        return 3
    failed = [d.direction for d in exp.directions if d.best() is None]
    if failed:
        print(f"cudnn_explorer: error: cuDNN ran no algorithm for {', '.join(failed)} of "
              f"{exp.problem.describe()}", file=sys.stderr)
        return 2
    return 0


def _stored(store, problem: ConvProblem, options) -> Optional[Exploration]:
    """The store's answer for ``problem``, looked up under this GPU's environment as last
    seen (measure/envcache.py: no torch, no CUDA) or, when anything it depends on changed,
    as the GPU reports it now; None when the store has none (the store stays open)."""
    from .measure import envcache

    try:
        env = envcache.cached_environment(options.device)
        if env is None:
            env = _measure_layer().environment(options.device)
            envcache.remember(env)
        exp = store.lookup(problem, env, options)
    except BaseException:
        store.close()
        raise
    if exp is not None:
        store.close()
        print(f"cudnn_explorer: answered from the results store '{store.path}' "
              f"(measured {exp.created}); --refresh measures again", file=sys.stderr)
    return exp


def _measure(a, problem: ConvProblem, options, store) -> Exploration:
    """Explore ``problem`` on the GPU, each finished direction saved in ``store`` (which is
    closed at the end), with progress as the flags ask."""
    pipeline = _measure_layer()
    try:
        if options.engines and not a.engines and not _frontend_built(options.device):
            options = options_from_args(a, engines=False)  # --engines says what is missing
            print("cudnn_explorer: note: engine configs skipped: this build of the extension "
                  "has no cudnn-frontend (pip install nvidia-cudnn-frontend, then rebuild)",
                  file=sys.stderr)
        t_start = time.perf_counter()

        def plain(msg):
            print(f"cudnn_explorer: [{time.perf_counter() - t_start:6.1f} s] {msg}",
                  file=sys.stderr, flush=True)

        def overwrite(msg):
            sys.stderr.write(f"\r\033[K{msg}")
            sys.stderr.flush()

        progress = plain if a.verbose else (
            overwrite if not a.quiet and sys.stderr.isatty() else None)
        try:
            return pipeline.explore(problem, options, progress=progress,
                                    on_direction=saver(store, problem, options))
        finally:
            if progress and not a.verbose:
                sys.stderr.write("\r\033[K")
    finally:
        if store is not None:
            store.close()


def _stored_config_times(a, problem: ConvProblem) -> dict:
    """Per GPU name, engine config (without its operation prefix) -> steady-state median
    ms of ``problem``'s stored results, the latest measurement of each; {} without a
    store. Read only: a missing store file is not created."""
    from .core.records import rankable

    if getattr(a, "no_store", False):
        return {}
    from .store.db import StoreError, default_path

    path = getattr(a, "store", None) or default_path()
    if not os.path.exists(path):
        return {}
    store = open_store(a)
    if store is None:
        return {}
    out: dict = {}
    try:
        rows = sorted(store.results(), key=lambda r: r[3])  # oldest first: the latest wins
    except StoreError as e:
        _without_store(e)
        return {}
    finally:
        store.close()
    for p, env, d, _ in rows:
        if p != problem or d.engines is None:
            continue
        for c in d.engines.configs:
            if rankable(c):
                out.setdefault(env.gpu_name, {})[c.tag.split("_", 1)[1]] = c.time
    return out


def _run_targets(a) -> int:
    """--target: cuDNN's heuristic rankings for other GPUs (no GPU, nothing measured)."""
    import json

    from .core.targets import resolve_targets, shipped_profiles
    from .report.format import fmt_version, table
    from .report.targets import render_targets

    if a.target.strip().lower() == "list":
        rows = [[k, e["gpu"], e["compute_capability"],
                 "synthesized" if e.get("synthesized") else "dumped from the device"]
                for k, e in sorted(shipped_profiles().items())]
        print(table(rows, headers=["target", "GPU", "cc", "profile"]))
        return 0
    problem = problem_from_args(a)
    options = options_from_args(a, engines=False)
    profiles = resolve_targets(a.target)
    pipeline = _measure_layer()
    from .measure.targets import rank_targets

    rankings = rank_targets(problem, options.directions, profiles)
    version = pipeline.native.runtime_info().get("cudnn", "")
    cudnn = fmt_version(version) or "?"
    if a.json != "-":
        sys.stdout.write(render_targets(problem, rankings, cudnn, options.benchmark_limit,
                                        measured=_stored_config_times(a, problem)))
    if a.json is not None:
        doc = {"schema": "cudnn_explorer.targets", "schema_version": 1, "cudnn": version,
               "kind": "heuristic, not measured", "problem": problem.to_dict(),
               "benchmark_limit": options.benchmark_limit,
               "rankings": [r.to_dict() for r in rankings]}
        write_output(json.dumps(doc, indent=1) + "\n", a.json, "--json")
    failed = [r for r in rankings if not r.ok]
    if failed and len(failed) == len(rankings):
        print(f"cudnn_explorer: error: no target answered: {failed[0].status}",
              file=sys.stderr)
        return 3
    return 0


def render_saved(a, flags: List[str], what: str, parse, render) -> int:
    """``--load`` of a model command: refuse any other flag or a NAME, read the file,
    render it (no GPU needed)."""
    bad = next((f for f in flags if f not in ("--load", "--debug")), None) or (
        a.name and "NAME")
    if bad:
        raise UserError(f"{bad} would be ignored: --load renders a saved {what}; drop "
                        f"{bad} or --load")
    data = read_bytes(a.load, "--load")  # its errors name the file already
    try:
        saved = parse(data)
    except UserError as e:
        raise UserError(f"--load '{a.load}': {e}") from None
    sys.stdout.write(render(saved))
    return 0


def add_model_args(m, sizes_help: str) -> None:
    """The model and its input, as ``model`` and ``advise`` take them (model_spec reads
    them)."""
    m.add_argument("name", nargs="?", help="a torchvision model name, e.g. resnet50")
    m.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                   help="your own nn.Module: a function that takes no arguments")
    m.add_argument("--batch", default="32", help="batch size (default 32)")
    m.add_argument("--input", default=None, metavar="CxHxW",
                   help="one sample's shape (default 3x224x224)")
    m.add_argument("--image", default=None, metavar="N", help="same as --input 3xNxN")
    m.add_argument("--sizes", default=None, metavar="A:B:STEP", help=sizes_help)
    m.add_argument("--amp", default="off", help="off | fp16 | bf16 (torch.autocast)")
    m.add_argument("--channels-last", action="store_true",
                   help="model and input in channels_last")
    t = m.add_mutually_exclusive_group()
    t.add_argument("--train", action="store_true",
                   help="a training step: forward and backward (the default)")
    t.add_argument("--eval", action="store_true", help="inference: forward only, eval mode")


def build_model_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m cudnn_explorer model", allow_abbrev=False,
        description="Capture every convolution of one iteration of a model (what cuDNN "
                    "really gets, after autocast), then explore each unique problem: "
                    "PyTorch's pick, the best legacy algorithm and the best engine config, "
                    "in ms per iteration.")
    m = p.add_argument_group("model")
    add_model_args(m, "variable input sizes: capture at each size S (320:640:32 or "
                      "320,416,512), the input 3xSxS or --input's shape with its height and "
                      "width set to S, and count the new problems each one brings")
    m.add_argument("--capture-only", action="store_true",
                   help="list the unique problems and their layers; explore nothing")
    m.add_argument("--target", metavar="GPUS",
                   help="no measurement: PyTorch's heuristic pick for every unique problem on "
                        "other GPUs, from cuDNN's deviceless heuristics (e.g. h200,a100,l4)")
    m.add_argument("--plot", metavar="PNG", help="with --target: a heatmap of the picks")
    m.add_argument("--profile", default="quick",
                   help="quick (default): Find and re-timing of the legacy rows, PyTorch's "
                        "picks and every engine config its heuristics and fallbacks list, "
                        "re-timed with 25 ms budgets; deep: every engine's knob space "
                        "sampled too, 100 ms budgets (any --budget-ms, --engine-budget-s "
                        "given wins)")
    m.add_argument("--consistency", action="store_true",
                   help="under torchrun: every rank runs every problem, and rank 0 reports "
                        "where identical GPUs differ (needs --json PATH: each rank writes "
                        "PATH.rankN.json)")
    m.add_argument("--resume", action="store_true",
                   help="measure only what the results store lacks (the default whenever "
                        "the store is on; after a run that was interrupted or lost a rank)")
    m.add_argument("--timed-iterations", default="20",
                   help="steady iterations timed in PyTorch's own run of the model, per "
                        "mode (default 20, after 5 warm-up ones)")
    add_run_args(p)
    p.set_defaults(direction="all")
    o = p.add_argument_group("output")
    o.add_argument("--json", default=None, metavar="PATH",
                   help="write the sweep (or the capture) to PATH, after every problem")
    o.add_argument("--load", metavar="PATH", help="render a saved sweep (no GPU needed)")
    o.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


MODEL_RUN_FLAGS = ("--profile", "--timed-iterations")
PROFILES = {"quick": dict(budget_ms=25.0, engine_budget_s=60.0, engine_sampling=False),
            "deep": {}}


def profile_options(a, flags: List[str], options: ExploreOptions) -> ExploreOptions:
    """``options`` as ``--profile`` sets them; a flag the user gave wins."""
    from dataclasses import replace

    name = str(a.profile).strip().lower()
    if name not in PROFILES:
        raise UserError(f"--profile '{a.profile}': valid: quick, deep")
    a.profile = name
    given = {"budget_ms": "--budget-ms", "engine_budget_s": "--engine-budget-s"}
    return replace(options, **{k: v for k, v in PROFILES[name].items()
                               if given.get(k) not in flags})


def model_spec(a):
    from .core.capture import ModelSpec
    from .core.problem import parse_int_list
    from .model import zoo

    if bool(a.name) == bool(a.model):
        raise UserError("model: give a torchvision model name or --model pkg.module:factory "
                        "(one of them)")
    if a.input and a.image:
        raise UserError("--image would be ignored: --input gives the whole shape; drop one")
    if a.sizes and a.image:
        raise UserError("--image would be ignored: --sizes gives the input sizes (3xSxS, or "
                        "--input's shape with its height and width set to S); drop one")
    if a.image:
        (n,) = parse_int_list(a.image, "--image")
        shape = zoo.parse_input(f"3x{n}x{n}")
    else:
        shape = zoo.parse_input(a.input or "3x224x224")
    amp = str(a.amp).strip().lower()
    if amp not in ("off", "fp16", "bf16"):
        raise UserError(f"--amp '{a.amp}': valid: off, fp16, bf16")
    batch = _int(a.batch, "--batch", lo=1)
    if batch > 1 << 20:
        raise UserError(f"--batch {batch}: valid: an integer from 1 to 1048576")
    spec = ModelSpec(name=a.name or "", factory=a.model or "", input_shape=list(shape),
                     batch=batch, amp=amp, channels_last=a.channels_last, train=not a.eval)
    return spec.over_sizes(zoo.parse_sizes(a.sizes)) if a.sizes else spec


def _model_targets(a, cap, profiles, pipeline) -> int:
    """model --target: every unique problem ranked for every target (heuristics only)."""
    import json

    from .measure.targets import rank_many
    from .report.format import fmt_version
    from .report.model import render_capture
    from .report.targets import plot_target_matrix, render_target_matrix

    rankings = rank_many([(u.problem, u.directions) for u in cap.problems], profiles)
    version = pipeline.native.runtime_info().get("cudnn", "")
    cudnn = fmt_version(version) or "?"
    sys.stdout.write(render_capture(cap) + "\n" + render_target_matrix(cap, rankings, cudnn))
    if a.plot:
        plot_target_matrix(cap, rankings, a.plot, f"{cap.model.describe()}: PyTorch's "
                           f"heuristic pick per target (cuDNN {cudnn}, not measured)")
        print(f"wrote {a.plot}", file=sys.stderr)
    if a.json:
        doc = {"schema": "cudnn_explorer.model_targets", "schema_version": 1,
               "kind": "heuristic, not measured", "cudnn": version,
               "capture": cap.to_dict(),
               "rankings": [[r.to_dict() for r in rs] for rs in rankings]}
        write_output(json.dumps(doc, indent=1) + "\n", a.json, "--json")
    return 0


def _run_model(argv: List[str]) -> int:
    parser = build_model_parser()
    if not argv:
        sys.stderr.write(parser.format_usage())
        raise UserError("model: give a model, e.g. model resnet50 --batch 32 --amp fp16")
    argv = join_negative_values(parser, argv)
    a = parser.parse_args(argv)
    flags = given_flags(parser, argv)
    if a.load:
        from .core.sweep import ModelSweep
        from .report.model import render_sweep

        return render_saved(a, flags, "sweep", ModelSweep.from_json, render_sweep)
    check_conflicts(flags)
    if a.capture_only or a.target:
        bad = next((f for f in flags if f in RUN_FLAGS + MODEL_RUN_FLAGS
                    and f != "--device"), None) or (
            a.capture_only and a.target and "--target")
        if bad:
            raise UserError(f"{bad} would be ignored: "
                            f"{'--capture-only' if a.capture_only else '--target'} explores "
                            f"nothing")
    if a.plot and not a.target:
        raise UserError("--plot needs --target (the heatmap is of the targets' picks)")
    check_output_path(a.plot, "--plot")
    profiles = None
    if a.target:
        from .core.targets import resolve_targets

        profiles = resolve_targets(a.target)
    spec = model_spec(a)
    options = profile_options(a, flags, options_from_args(a, engines=not a.no_engines))
    iterations = _int(a.timed_iterations, "--timed-iterations", lo=1)
    if iterations > 10000:
        raise UserError(f"--timed-iterations {iterations}: valid: an integer from 1 to "
                        f"10000")
    if a.no_pytorch and "--timed-iterations" in flags:
        raise UserError("--timed-iterations would be ignored: --no-pytorch runs none of "
                        "PyTorch's modes; drop one")
    check_output_path(a.json, "--json")
    if a.resume and (a.refresh or a.no_store):
        raise UserError(f"--resume needs the results store: drop "
                        f"{'--refresh' if a.refresh else '--no-store'} or --resume")
    pipeline = _measure_layer()
    from .model import capture as capture_mod
    from .model import distributed
    from .report.model import render_capture, render_sweep

    world = distributed.world_from_env()
    if a.consistency and world is None:
        raise UserError("--consistency compares the GPUs of a torchrun sweep; start it with "
                        "torchrun --nproc-per-node N -m cudnn_explorer model ...")
    if world is not None and not (a.capture_only or a.target):
        return _model_distributed(a, flags, world, spec, options, iterations, pipeline)

    import torch

    if (a.capture_only or a.target) and not torch.cuda.is_available():
        device = "cpu"
        print("cudnn_explorer: note: no GPU: captured on the CPU, where autocast and "
              "layouts may differ from the GPU's", file=sys.stderr)
    else:
        pipeline.native.require_gpu(options.device)  # no GPU: says what is missing, exit 3
        device = f"cuda:{options.device}"
    cap = capture_mod.capture_model(spec, device)
    if a.target and cap.problems:
        return _model_targets(a, cap, profiles, pipeline)
    if a.capture_only or not cap.problems:
        sys.stdout.write(render_capture(cap))
        if a.json:
            write_output(cap.to_json() + "\n", a.json, "--json")
        return 0
    from .model.sweep import sweep

    bar = None
    if not a.quiet:
        from tqdm import tqdm

        bar = tqdm(total=len(cap.problems), unit="problem", file=sys.stderr,
                   dynamic_ncols=True, disable=None if not a.verbose else False)

    def progress(done, total, msg):
        if bar is not None:
            bar.n = done
            bar.set_postfix_str(msg[:60], refresh=True)

    def save(sw):
        if a.json:
            write_output(sw.to_json() + "\n", a.json, "--json", quiet=True)

    store = open_store(a)
    env = pipeline.environment(options.device) if store is not None else None
    run, bench = None, None
    if options.pytorch:  # PyTorch's own run of the whole model, one child per mode
        def say(msg):
            if bar is not None:
                bar.set_postfix_str(msg[:60], refresh=True)
            elif "from the results store" in msg:
                print(f"cudnn_explorer: {msg}", file=sys.stderr)

        run, bench = _model_run(cap, options, iterations, say, _store_cache(a, store, env, cap))

    def cached(problem, one):
        if store is None or a.refresh:
            return None
        return store.lookup(problem, env, one, partial=True)

    try:
        sw = sweep(cap, options, save=save, progress=progress, cached=cached,
                   saver=lambda problem, one: saver(store, problem, one), bench=bench,
                   profile=a.profile, pytorch_run=run)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        kept = [f"'{a.json}'"] if a.json else []
        kept += [f"the results store '{store.path}'"] if store is not None else []
        print("cudnn_explorer: interrupted: every direction that finished is in "
              + (" and ".join(kept) if kept else "nothing (no --json, no store)")
              + "; run the same command again to measure only the rest", file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
        if store is not None:
            store.close()
    sys.stdout.write(render_sweep(sw))
    if a.json:
        print(f"wrote {a.json}", file=sys.stderr)
    failed = [e for e in sw.entries if e.error]
    if failed:
        print(f"cudnn_explorer: error: {len(failed)} of {len(cap.problems)} problems were not "
              f"explored; the report lists why", file=sys.stderr)
        return 3
    return 0


def _store_cache(a, store, env, cap):
    """run_model's cache in the results store the flags chose (with --refresh it only
    keeps the new runs), or None without a store."""
    from .model.pytorch_run import StoreCache

    if store is None:
        return None
    return StoreCache(store, env, cap.model.describe(), _without_store, read=not a.refresh)


def _model_run(cap, options, iterations: int, say, cache):
    """PyTorch's own run of the model, and the pipeline's bench that takes its picks."""
    from .model.pytorch_run import ModelBench, run_model

    run, per_problem = run_model(cap, options, iterations=iterations, progress=say,
                                 cache=cache)
    return run, ModelBench(options.device, per_problem)


def build_advise_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m cudnn_explorer advise", allow_abbrev=False,
        description="Should torch.backends.cudnn.benchmark be on for this workload? Runs "
                    "the model in fresh processes with benchmark on, off and deterministic, "
                    "at every input size, and weighs the first calls' cost against the "
                    "steady-state saving over --iterations iterations.")
    m = p.add_argument_group("workload")
    add_model_args(m, "variable input sizes S, equally frequent (320:640:32 or "
                      "320,416,512): the input 3xSxS or --input's shape with its height and "
                      "width set to S")
    m.add_argument("--shape-dist", default=None, metavar="FILE",
                   help="variable input sizes with their frequencies, as --sizes: one "
                        "'SIZE COUNT' per line")
    m.add_argument("--iterations", default="10000",
                   help="how many iterations the workload runs (default 10000)")
    m.add_argument("--repeats", default="0", metavar="K",
                   help="pick stability: K more runs of the model with benchmark on (2 to "
                        "50), each in a fresh process; per layer, how often each plan was "
                        "picked and the steady-time spread between those plans (default 0: "
                        "off)")
    r = p.add_argument_group("run")
    r.add_argument("--device", default="0", help="CUDA device index (default 0)")
    r.add_argument("--seed", default="0", help="seed of the model's weights and inputs")
    r.add_argument("--benchmark-limit", default=None, metavar="N",
                   help="torch.backends.cudnn.benchmark_limit with benchmark on (default: "
                        "PyTorch's, 10)")
    r.add_argument("--child-timeout", default="300",
                   help="seconds per input size before a run of the model is declared hung")
    r.add_argument("--target-ci", default="0.5",
                   help="time steady iterations until each mean's 95%% confidence interval "
                        "is within +-this %% (default 0.5; at most a minute per size)")
    r.add_argument("--no-graph", action="store_true",
                   help="time the steady iterations eagerly (host time included) instead of "
                        "as replays of a CUDA graph of the whole step")
    r.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r.add_argument("--store", default=None, metavar="PATH",
                   help="the results store: runs of the model measured before with the same "
                        "settings answer from it (default ~/.cache/cudnn_explorer/results.db)")
    r.add_argument("--no-store", action="store_true", help="use no results store")
    r.add_argument("--refresh", action="store_true",
                   help="run the model again even where the store has the runs")
    o = p.add_argument_group("output")
    o.add_argument("--json", default=None, metavar="PATH", help="write the advice to PATH")
    o.add_argument("--load", metavar="PATH", help="render a saved advice (no GPU needed)")
    o.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def _run_advise(argv: List[str]) -> int:
    from dataclasses import replace

    from .core.advice import Advice, parse_shape_dist
    from .core.files import read_text
    from .report.advice import render_advice

    parser = build_advise_parser()
    if not argv:
        sys.stderr.write(parser.format_usage())
        raise UserError("advise: give a model, e.g. advise resnet50 --batch 32 --amp fp16")
    argv = join_negative_values(parser, argv)
    a = parser.parse_args(argv)
    flags = given_flags(parser, argv)
    if a.load:
        return render_saved(a, flags, "advice", Advice.from_json, render_advice)
    if a.shape_dist and (a.sizes or a.image):
        which = "--sizes" if a.sizes else "--image"
        raise UserError(f"{which} would be ignored: --shape-dist gives the input sizes; "
                        f"drop one")
    spec = model_spec(a)
    if a.shape_dist:
        dist = parse_shape_dist(read_text(a.shape_dist, "--shape-dist"), a.shape_dist)
        spec = spec.over_sizes([s for s, _ in dist])
    elif spec.sizes:
        dist = [(s, 1.0) for s in spec.sizes]
    else:
        dist = [(spec.input_shape[-1], 1.0)]
    n = _int(a.iterations, "--iterations", lo=1)
    if n > 10**12:
        raise UserError(f"--iterations {n}: valid: an integer from 1 to 10**12")
    try:
        target = float(a.target_ci)
    except ValueError:
        target = float("nan")
    if not 0.01 <= target <= 50:
        raise UserError(f"--target-ci {a.target_ci}: valid: a percentage from 0.01 to 50")
    repeats = _int(a.repeats, "--repeats", lo=0)
    if repeats == 1 or repeats > 50:
        raise UserError(f"--repeats {repeats}: valid: 0 (off) or 2 to 50 fresh processes")
    options = ExploreOptions.create(source="cli", device=a.device, seed=a.seed,
                                    child_timeout_s=a.child_timeout,
                                    benchmark_limit=a.benchmark_limit)
    if a.no_store and (a.store or a.refresh):
        raise UserError(f"{'--store' if a.store else '--refresh'} would be ignored: "
                        f"--no-store uses no store; drop one")
    check_output_path(a.json, "--json")
    pipeline = _measure_layer()
    pipeline.native.require_gpu(options.device)
    from .model import capture as capture_mod
    from .model.pytorch_run import model_modes, run_model
    from .core.version import __version__

    cap = capture_mod.capture_model(spec, f"cuda:{options.device}")
    env = pipeline.environment(options.device)
    store = open_store(a)
    cache = _store_cache(a, store, env, cap)
    modes = [m for m in model_modes(options.benchmark_limit)
             if not (m.mode == "benchmark" and m.benchmark_limit == 0
                     and options.benchmark_limit != 0)]

    def say(msg):
        if not a.quiet:
            print(f"[advise] {msg}", file=sys.stderr, flush=True)

    run, _ = run_model(cap, options, iterations=10, progress=say, modes=modes,
                       target_ci=target / 100, cache=cache, graph=not a.no_graph)
    rep, stability = None, []
    if repeats:
        from .core.advice import pick_stability
        from .measure.children import ModeSpec
        from .model.pytorch_run import retime_plans

        again = [ModeSpec(f"benchmark, repeat {k + 1}", "benchmark", False,
                          options.benchmark_limit) for k in range(repeats)]
        rep, _ = run_model(cap, options, iterations=3, warmup=1, progress=say, modes=again,
                           cache=cache, graph=not a.no_graph)
        stability = retime_plans(cap, pick_stability(rep), options, say)
    from .core.records import utc_now

    if store is not None:
        store.close()
    adv = Advice(capture=cap, pytorch_run=run, sizes=[[s, c] for s, c in dist],
                 iterations=n, environment=env,
                 tool_version=__version__,
                 created=utc_now(), repeats=rep, stability=stability)
    if a.json:
        write_output(adv.to_json() + "\n", a.json, "--json")
    if run.mode("benchmark") is None or run.mode("heuristic") is None:
        from .report.model import render_model_run

        sys.stdout.write(render_model_run(run, cap))
        print("cudnn_explorer: error: the runs of the model with benchmark on and off are "
              "both needed for a verdict; see above", file=sys.stderr)
        return 3
    sys.stdout.write(render_advice(adv))
    return 0


PLOTS = {"pareto": "time against workspace per direction, with the Pareto frontier and "
                   "PyTorch's picks (a saved exploration)",
         "roofline": "achieved TFLOP/s against arithmetic intensity, under the GPU's "
                     "ceilings (a saved exploration)",
         "gaps": "per problem-direction, the time PyTorch's pick leaves per iteration, "
                 "sorted, with the cumulative sum (a saved model sweep)"}


def _stored_exploration(path: str, n: int):
    """The n-th most recently measured exploration in the store at ``path``."""
    from .store.db import Store

    path = _existing_store(path)
    with Store(path) as store:  # StoreError: exit 3, naming the file
        exps = store.explorations()
    if n > len(exps):
        raise UserError(f"--pick {n}: the store holds {len(exps)} results")
    exp = exps[-n]
    print(f"plotting {exp.problem.describe()} on {exp.environment.gpu_name}, measured "
          f"{exp.created}", file=sys.stderr)
    return exp


def _run_plot(argv: List[str]) -> int:
    p = _Parser(prog="python -m cudnn_explorer plot", allow_abbrev=False,
                description="Plot a saved result as PNG and SVG (no GPU needed): "
                            + "; ".join(f"{k}: {v}" for k, v in PLOTS.items()))
    p.add_argument("kind", nargs="?", help=" | ".join(PLOTS))
    p.add_argument("file", nargs="?", help="a saved exploration (--json) or model sweep")
    p.add_argument("--store", nargs="?", const="", default=None, metavar="PATH",
                   help="plot a result from the results store instead of FILE (pareto, "
                        "roofline; default store ~/.cache/cudnn_explorer/results.db)")
    p.add_argument("--pick", default="1", metavar="N",
                   help="with --store: the N-th most recently measured result (default 1)")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="where to write (PATH.png, PATH.svg and PATH.json; default: beside "
                        "FILE, or plot-KIND in this directory with --store)")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    if not argv:
        sys.stderr.write(p.format_usage())
        raise UserError(f"plot: give a kind ({', '.join(PLOTS)}) and a saved file")
    a = p.parse_args(argv)
    if a.kind not in PLOTS:
        raise UserError(f"plot kind '{a.kind}': valid: {', '.join(PLOTS)}")
    if a.store is not None and a.file:
        raise UserError("FILE would be ignored: --store plots a stored result; drop one")
    if a.store is not None and a.kind == "gaps":
        raise UserError("plot gaps needs a saved model sweep (model --json); the store keeps "
                        "problems, not sweeps")
    if a.store is None and not a.file:
        raise UserError(f"plot {a.kind}: give a saved file, e.g. data/reference/"
                        f"h200-default-fp32.json, or --store")
    pick = _int(a.pick, "--pick", lo=1)
    out = a.out or (os.path.splitext(a.file)[0] + f".{a.kind}" if a.file else f"plot-{a.kind}")
    base = os.path.splitext(out)[0] if out.lower().endswith((".png", ".svg")) else out
    for path in (base + ".png", base + ".svg", base + ".json"):
        check_output_path(path, "--out")
    from .report import plots

    if a.kind == "gaps":
        from .core.sweep import ModelSweep

        data = read_bytes(a.file, "plot")
        try:
            sw = ModelSweep.from_json(data)
        except UserError as e:
            raise UserError(f"plot gaps '{a.file}': {e} (gaps plots a model sweep)") from None
        fig = plots.gaps(sw)
    else:
        exp = load_file(a.file, f"plot {a.kind}") if a.file else \
            _stored_exploration(a.store, pick)
        fig = plots.pareto(exp) if a.kind == "pareto" else plots.roofline(exp)
    for path in plots.save(fig, out):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _model_distributed(a, flags, world, spec, options, iterations, pipeline) -> int:
    """One rank of a torchrun sweep (model/distributed.py): its share measured on its own
    GPU into the store; rank 0 merges from the store and reports."""
    from dataclasses import replace

    from .model import distributed

    if "--device" in flags:
        raise UserError("--device would be ignored: under torchrun each rank uses the GPU of "
                        "its LOCAL_RANK")
    if a.no_store:
        raise UserError("--no-store: under torchrun the ranks' results travel through the "
                        "results store; give --store PATH (on a shared filesystem across "
                        "nodes)")
    if a.consistency and not a.json:
        raise UserError("--consistency needs --json PATH: each rank writes PATH.rankN.json "
                        "and rank 0 compares them")
    timeout = 24 * 3600.0
    options = replace(options, device=world.local_rank)
    pipeline.native.require_gpu(world.local_rank)
    distributed.init(world, timeout)
    try:  # the process group is closed on every way out (else gloo aborts the process)
        return _rank_job(a, world, spec, options, iterations, pipeline, timeout)
    finally:
        distributed.finish()


def _rank_job(a, world, spec, options, iterations, pipeline, timeout) -> int:
    """The part of a rank's work that runs inside the process group."""
    from .model import distributed
    from .model.capture import capture_model
    from .model.sweep import sweep
    from .report.model import render_consistency, render_sweep

    rank = world.rank
    distributed.check_devices(world, distributed.device_id(world.local_rank))
    cap = capture_model(spec, f"cuda:{world.local_rank}")
    store = open_store(a)
    if store is None:
        print("cudnn_explorer: error: under torchrun the results store is needed",
              file=sys.stderr)
        return 3
    env = pipeline.environment(world.local_rank)

    def say(msg):
        if not a.quiet:
            print(f"[rank {rank}] {msg}", file=sys.stderr, flush=True)

    run, bench = None, None
    if options.pytorch and a.consistency:  # each GPU its own run, never another rank's
        run, bench = _model_run(cap, options, iterations, say, None)
    elif options.pytorch:
        from .model.pytorch_run import StoreCache, model_modes, run_model

        # PyTorch's run of the model, its modes shared out between the ranks through the
        # store; then every rank reads all (a mode is read only under the reading rank's
        # own environment: another kind of GPU runs it again).
        n = len(model_modes(options.benchmark_limit))
        run_model(cap, options, iterations=iterations, progress=say,
                  cache=_store_cache(a, store, env, cap), share=range(rank, n, world.size))
        why = distributed.barrier(world, timeout, "the end of PyTorch's run of the model")
        if why:
            say(f"{why}; the modes another rank did not store are run here")
        run, bench = _model_run(cap, options, iterations, say,
                                StoreCache(store, env, cap.model.describe(), _without_store))
    shares = distributed.shard(cap.problems, world.size)
    mine = list(range(len(cap.problems))) if a.consistency else shares[rank]
    say(f"{len(mine)} of {len(cap.problems)} unique problems on GPU {world.local_rank}")
    mine_json = f"{a.json}.rank{rank}.json" if a.consistency else None
    t0 = time.perf_counter()

    def measure(share):
        def cached(problem, one):
            return None if a.refresh or a.consistency else store.lookup(problem, env, one,
                                                                        partial=True)

        sweep(cap, options, cached=cached, bench=bench, profile=a.profile, pytorch_run=run,
              only=share, saver=lambda problem, one: saver(store, problem, one),
              progress=lambda done, total, msg: msg and say(f"{done}/{total} {msg}"),
              save=(lambda sw: write_output(sw.to_json() + "\n", mine_json, "--json",
                                            quiet=True)) if mine_json else (lambda sw: None))

    error = distributed.run_share(world, mine, measure)
    if error:
        print(f"cudnn_explorer: error: {error}", file=sys.stderr)
    why = distributed.barrier(world, timeout)
    if rank != 0:
        store.close()
        return 3 if error else 0
    if a.consistency:
        from .core.sweep import ModelSweep

        sweeps = []
        for r in range(world.size):
            path = f"{a.json}.rank{r}.json"
            try:
                sweeps.append(ModelSweep.from_json(read_bytes(path, "--json")))
            except UserError as e:
                print(f"cudnn_explorer: error: rank {r}'s sweep: {e}", file=sys.stderr)
        store.close()
        sys.stdout.write(render_consistency(sweeps))
        return 0 if len(sweeps) == world.size and not why and not error else 3
    sw = distributed.merge(cap, options, lambda p, o: store.lookup(p, env, o), env,
                           a.profile, run, round(time.perf_counter() - t0, 3))
    store.close()
    sys.stdout.write(render_sweep(sw))
    if a.json:
        write_output(sw.to_json() + "\n", a.json, "--json")
    if sw.missing:
        print(f"cudnn_explorer: error: {len(sw.missing)} of {len(cap.problems)} unique "
              f"problems were not measured (#{', #'.join(str(i + 1) for i in sw.missing)})"
              f"{': ' + why if why else ''}; run the same command again (--resume) to "
              f"measure only those", file=sys.stderr)
        return 3
    return 0


def _frontend_built(device: int) -> bool:
    """Whether the extension has cudnn-frontend. True when the extension or the GPU is
    missing: then explore() reports that, as one line, before anything else."""
    from .measure import native

    try:
        native.require_gpu(device)
        return native.frontend_available()
    except ExplorerError:
        return True


def main(argv: Optional[List[str]] = None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv) or bool(
        os.environ.get("CUDNN_EXPLORER_DEBUG"))
    try:
        return _run(argv)
    except ExplorerError as e:
        if debug:
            raise
        print(f"cudnn_explorer: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cudnn_explorer: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an internal error: still one line unless --debug
        if debug:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if "out of memory" in first.lower():  # torch's OutOfMemoryError, a CUDA error
            print(f"cudnn_explorer: error: out of GPU memory: {first}", file=sys.stderr)
            return 3
        print(f"cudnn_explorer: internal error: {type(e).__name__}: {first} "
              f"(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


def console() -> None:
    """The ``cudnn-explorer`` console script."""
    sys.exit(main())
