"""The popular claims about torch.backends.cudnn.benchmark, measured on this machine.

Every number comes from the product's own commands (run as subprocesses, results saved
as JSON beside the table): `advise` for the speed, memory, determinism and shape claims,
the problem command for Winograd's workspace, and the results store's `compare` for
"different cards choose differently". Writes a Markdown table: claim, measured value with
its 95% confidence interval where there is one, verdict, what pinning changes (steps of
its own: the workload swept, a plan file written from the sweep, `advise --plans` with
it), and the command.

Usage: python scripts/claims.py [--out docs/claims.md] [--keep DIR] [--batch 32]
           [--steps r50,sizes,dist80,winograd,...] [--device N] [--store PATH] [--table-only]
Needs a GPU; about 20 minutes on an H200, and the pinned steps' sweeps on top (ResNet-50's
at one size about 3 minutes, at five sizes over 10). Each step's result is a JSON file in
--keep: a step whose file is there, complete, is not measured again, so a run cut short
goes on where it stopped, and the steps can run on several GPUs at once (one --steps list
and --device each, the same --keep), then --table-only writes the table from the files.
The commands keep their results in the results store --store, by default results.db in
--keep: a step cut short answers what had finished from it (problems swept, advise's runs
of the model), also on another machine given the same folder.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudnn_explorer.core.advice import (Advice, comparable, steady_difference,  # noqa: E402
                                        verdict)
from cudnn_explorer.report.format import fmt_version  # noqa: E402

GIB = 2**30
# How steady iterations were timed, as the table says it.
STEPS_BY = {"graph": "CUDA-graph replays of the whole step: GPU time",
            "eager": "eager steps, host time included"}


STEPS = ("r50", "sizes", "dist80", "winograd", "compare", "targets", "r50-pinned",
         "det-pinned", "sizes-pinned", "dist80-pinned")
DIST80 = "224 80\n256 5\n288 5\n320 5\n352 5\n"  # the 80% rule's workload: size, share


def shown_command(args, keep):
    """A command as the table shows it: the files in --keep by their names."""
    return ("python -m cudnn_explorer " + " ".join(shlex.quote(a) for a in args)).replace(
        keep + os.sep, "")


def measure(path, args, keep, device, store):
    """Run the product's command ``args`` (which writes ``path``; a command whose output is
    the result writes it to ``path``, a .txt) on ``device`` with the results store
    ``store``, unless ``path`` is there from an earlier run that finished (a command cut
    short writes what had finished with "complete": false: measured again, it answers
    that much from the store and goes on)."""
    if finished(path):
        return
    if args[0] == "plans":  # (writing a plan file measures nothing)
        cli(args, keep)
        return
    if device is not None and args[0] != "compare" and "--target" not in args:
        args = [*args, "--device", str(device)]  # (those two need no GPU)
    if "--target" not in args:  # (it explores nothing, so it keeps nothing)
        args = [*args, "--store", store]
    p = cli(args, keep)
    if path.endswith(".txt") and p.returncode == 0:
        with open(path, "w") as f:
            f.write(p.stdout)


def finished(path):
    """Whether ``path`` holds the result of a command that ran to its end (one that is
    unreadable is measured again)."""
    try:
        with open(path) as f:
            return not path.endswith(".json") or json.load(f).get("complete") is not False
    except (OSError, ValueError, AttributeError):
        return False


def cli(args, keep):
    shown = shown_command(args, keep)
    print(f"$ {shown}", flush=True)
    p = subprocess.run([sys.executable, "-m", "cudnn_explorer", *args], cwd=ROOT,
                       capture_output=True, text=True)
    with open(os.path.join(keep, "log.txt"), "a") as f:
        f.write(f"$ {shown}\nexit {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}\n")
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
    return p


def load_advice(path):
    with open(path) as f:
        return Advice.from_json(f.read())


def pct(x):
    return f"{100 * x:+.1f}%"


def commands(keep, batch):
    """Each step: its product commands in order, each with the file it writes (the last
    one's is the step's result)."""
    dist = os.path.join(keep, "dist80.txt")
    return {
        # 1-3: ResNet-50 at 224, fp32 (TF32 as PyTorch's default), training steps
        "r50": [(os.path.join(keep, "resnet50_224.json"),
                 ["advise", "resnet50", "--batch", batch, "--iterations", "10000",
                  "--repeats", "3", "--json", os.path.join(keep, "resnet50_224.json")])],
        # 4: variable input sizes (the write-up's YOLO; a ResNet-50 at five square sizes)
        "sizes": [(os.path.join(keep, "resnet50_sizes.json"),
                   ["advise", "resnet50", "--batch", "16", "--sizes", "320:576:64", "--iterations",
                    "1000", "--json", os.path.join(keep, "resnet50_sizes.json")])],
        # 5: the 80% rule
        "dist80": [(os.path.join(keep, "resnet50_80.json"),
                    ["advise", "resnet50", "--batch", "16", "--shape-dist", dist,
                     "--iterations", "10000", "--json", os.path.join(keep, "resnet50_80.json")])],
        # 7: the store's comparison of environments, and the deviceless heuristics
        "compare": [(os.path.join(keep, "compare.txt"), ["compare"])],
        "targets": [(os.path.join(keep, "targets.txt"),
                     ["model", "resnet50", "--batch", batch, "--target",
                      "h200,a100,h100,l4,v100,rtx4090,b200"])],
        # the pinned column: each workload pinned to the plans its own sweep found
        "r50-pinned": pinned_chain(keep, "resnet50_224_pinned", ["--batch", batch],
                                   ["--iterations", "10000"]),
        # the same sweep's deterministic configs only (`plans write --deterministic`)
        "det-pinned": pinned_chain(keep, "resnet50_224_det_pinned", ["--batch", batch],
                                   ["--iterations", "10000"], plans_args=["--deterministic"],
                                   sweep_of="resnet50_224_pinned"),
        "sizes-pinned": pinned_chain(keep, "resnet50_sizes_pinned",
                                     ["--batch", "16", "--sizes", "320:576:64"],
                                     ["--iterations", "1000"]),
        "dist80-pinned": pinned_chain(
            keep, "resnet50_80_pinned",
            ["--batch", "16", "--sizes", ",".join(ln.split()[0] for ln in DIST80.splitlines())],
            ["--shape-dist", dist, "--iterations", "10000"], sized=False),
        # 6: Winograd's workspace, per algorithm and per engine config (every row and
        # config timed in full: the thorough profile)
        "winograd": [(os.path.join(keep, "winograd.json"),
                      ["--shape", "32,64,56,56", "--out-channels", "64", "--kernel", "3",
                       "--tf32", "off", "--no-pytorch", "--profile", "thorough",
                       "--quiet", "--json", os.path.join(keep, "winograd.json")])],
    }


def pinned_chain(keep, name, model_args, advise_args, sized=True, plans_args=(),
                 sweep_of=None):
    """A pinned step, each command with the file it writes (the last one's is the step's
    result): ResNet-50 swept with ``model_args``, a plan file from the sweep (written with
    ``plans_args``), and advise with it, ``advise_args`` and the same batch (and sizes,
    unless ``sized`` is False). ``sweep_of``: the step name whose sweep this one shares
    (made once, by whichever of the two runs first)."""
    plans, out = (os.path.join(keep, f"{name}.{ext}") for ext in ("plans.json", "json"))
    sweep = os.path.join(keep, f"{sweep_of or name}.sweep.json")
    shape = model_args if sized else model_args[:2]
    return [(sweep, ["model", "resnet50", *model_args, "--json", sweep]),
            (plans, ["plans", "write", sweep, "-o", plans, *plans_args]),
            (out, ["advise", "resnet50", *shape, *advise_args, "--plans", plans,
                   "--json", out])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "claims.md"))
    ap.add_argument("--keep", default=None, help="keep the JSON results here")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"the steps to measure (default all: {','.join(STEPS)})")
    ap.add_argument("--device", type=int, default=None, help="the GPU the steps run on")
    ap.add_argument("--store", default=None, metavar="PATH",
                    help="the results store the commands keep their results in (default: "
                         "results.db in --keep)")
    ap.add_argument("--table-only", action="store_true",
                    help="measure nothing: the table from the files in --keep")
    a = ap.parse_args()
    if a.table_only and not a.keep:
        ap.error("--table-only needs --keep DIR (where the steps wrote their files)")
    steps = [x.strip() for x in a.steps.split(",") if x.strip()]
    bad = [x for x in steps if x not in STEPS]
    if bad:
        ap.error(f"--steps: unknown step {bad[0]!r}; valid: {', '.join(STEPS)}")
    keep = a.keep or tempfile.mkdtemp(prefix="claims_")
    os.makedirs(keep, exist_ok=True)
    with open(os.path.join(keep, "dist80.txt"), "w") as f:
        f.write(DIST80)
    cmds = commands(keep, a.batch)
    shown = {step: "; ".join(shown_command(args, keep) for _, args in cmds[step])
             for step in cmds}
    for step in steps if not a.table_only else ():
        for path, args in cmds[step]:  # a chain stops at a command that failed
            measure(path, args, keep, a.device, a.store or os.path.join(keep, "results.db"))
            if not finished(path):
                break
    if not a.table_only and set(steps) != set(STEPS):
        print(f"measured {', '.join(steps)} into {keep}; the table: --table-only --keep {keep}")
        return 0
    pinned = pinned_cells(keep, cmds, shown)
    rows = [[c, m, v, pinned.get(c, ""), cmd] for c, m, v, cmd in table_rows(keep, cmds, shown)]
    env, found = None, next((p for step in cmds for p, _ in cmds[step]
                             if p.endswith(".json") and os.path.exists(p)), None)
    if found:  # the environment of the first result there
        with open(found) as f:
            e = json.load(f).get("environment") or {}
        env = f"{e.get('gpu_name', '?')}, torch {e.get('torch_version', '?')}, cuDNN " \
              f"{fmt_version(e.get('cudnn_runtime', '?'))}"
    lines = ["# The popular claims, measured", "",
             f"Measured by `python scripts/claims.py` on {env or 'no GPU (nothing measured)'}. "
             f"Each verdict is for this machine and these workloads; the commands reproduce "
             f"them.", "",
             "| claim | measured | verdict | pinned to a plan file | command |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {c} | {m} | {v} | {pin} | `{cmd}` |" for c, m, v, pin, cmd in rows]
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(keep, "claims.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))
    print(f"wrote {a.out}; results in {keep}")
    return 0


def table_rows(keep, cmds, shown):
    """The table's rows from the steps' files; a step without its file is said so."""
    rows = []

    # 1-3: ResNet-50 at 224
    r50, cmd = cmds["r50"][-1][0], shown["r50"]
    if missing(rows, r50, cmd, "ResNet-50 at 224 runs 15-23% faster per iteration with "
                               "benchmark on"):
        adv = load_advice(r50)
        costs = adv.costs()
        d, lo, hi = steady_difference(costs)
        off = costs[0].mean_off
        rows.append(["ResNet-50 at 224 runs 15-23% faster per iteration with benchmark on",
                     f"{pct(d / off)} (95% CI {pct(lo / off)} to {pct(hi / off)}) of the "
                     f"steady iteration with benchmark off ({STEPS_BY[costs[0].method]})",
                     range_verdict(lo / off, hi / off, 0.15, 0.23), cmd])
        c = costs[0]
        grow = c.peak_on_bytes / c.peak_off_bytes - 1 if c.peak_off_bytes else 0.0
        rows.append(["memory is basically unchanged with benchmark on",
                     f"first-iteration peak reserved {c.peak_on_bytes / GIB:.2f} GiB on vs "
                     f"{c.peak_off_bytes / GIB:.2f} GiB off ({pct(grow)})",
                     "holds" if abs(grow) < 0.05 else "does not hold", cmd])
        found = median_cost(adv.pytorch_run, "deterministic", "benchmark")
        if found is not None:
            cost, n_det, n_ben, how = found
            # one process per mode: how far apart fresh processes land (the benchmark-on
            # run and its repeats) bounds what one pair of medians can tell
            means = c.process_means_on
            spread = (max(means) - min(means)) / statistics.mean(means) if means else None
            rows.append(["deterministic mode costs about 20%",
                         f"{pct(cost)} per iteration (medians of {n_det} and {n_ben} "
                         f"{STEPS_BY[how]}, one process each"
                         + (f"; fresh processes with benchmark on differ by up to "
                            f"{100 * spread:.1f}%)" if spread is not None else ")"),
                         range_verdict(cost - (spread or 0.0), cost + (spread or 0.0),
                                       0.15, 0.25), cmd])
        unstable = [s for s in adv.stability if not s.stable]
        worst = max((s.spread or 0.0 for s in unstable), default=0.0)
        runs = len(adv.repeats.modes) if adv.repeats is not None else 0
        rows.append(["(measured here) PyTorch's benchmark pick is stable from run to run",
                     f"{len(adv.stability) - len(unstable)} of {len(adv.stability)} "
                     f"problem-directions picked the same plan in {runs} fresh processes; "
                     f"the largest spread between picks {100 * worst:.1f}%"
                     if adv.stability else "not measured: no repeated runs in the advice",
                     ("holds" if not unstable else "does not hold") if adv.stability
                     else "untested", cmd])

    # 4: variable input sizes
    var, cmd = cmds["sizes"][-1][0], shown["sizes"]
    if missing(rows, var, cmd, "with variable input sizes benchmark mode runs about 8% "
                               "slower"):
        adv = load_advice(var)
        costs = adv.costs()
        v = verdict(costs, adv.iterations)
        ratio = v.total_on_ms / v.total_off_ms - 1
        savings = [(c.mean_off - c.mean_on) / c.mean_off for c in costs]
        first = [c.search_cost_ms for c in costs]
        rows.append(["with variable input sizes benchmark mode runs about 8% slower",
                     f"{pct(ratio)} expected total for {adv.iterations} iterations over "
                     f"{len(costs)} sizes ({v.total_on_ms / 1e3:.1f} s on, "
                     f"{v.total_off_ms / 1e3:.1f} s off): each new size's first iteration "
                     f"costs {min(first) / 1e3:.1f}-{max(first) / 1e3:.1f} s more with "
                     f"benchmark on than off, while its steady iterations are "
                     f"{pct(min(savings))} to {pct(max(savings))} faster ({methods(costs)})",
                     sizes_verdict(ratio, v.break_even), cmd])

    # 5: the 80% rule
    rule, cmd = cmds["dist80"][-1][0], shown["dist80"]
    if missing(rows, rule, cmd, "turn benchmark on when at least 80% of inputs share one "
                                "shape"):
        adv = load_advice(rule)
        costs = adv.costs()
        v = verdict(costs, adv.iterations)
        top = max(costs, key=lambda c: c.share)
        mean_off = sum(c.share * c.mean_off for c in costs)
        rest = sorted({f"{100 * c.share:.0f}%" for c in costs if c is not top})
        extra = sum(c.search_cost_ms for c in costs)
        rows.append(["turn benchmark on when at least 80% of inputs share one shape",
                     f"{100 * top.share:.0f}% of inputs at {top.size}, "
                     f"{' or '.join(rest)} at each of {len(costs) - 1} others, "
                     f"{adv.iterations} iterations: benchmark on saves "
                     f"{pct(v.saving_ms / mean_off)} of the steady iteration (95% CI "
                     f"{pct(v.saving_low_ms / mean_off)} to {pct(v.saving_high_ms / mean_off)}; "
                     f"{methods(costs)}), its first iterations cost "
                     f"{extra / 1e3:.1f} s more over the {len(costs)} sizes than with it off; "
                     f"expected total {v.total_on_ms / 1e3:.1f} s on, "
                     f"{v.total_off_ms / 1e3:.1f} s off: the advice is '{v.choice}'"
                     + (f" (benchmark on pays off after {v.break_even} iterations)"
                        if v.break_even else " (benchmark on never pays off)"),
                     "holds here" if v.choice == "on" else "does not hold here", cmd])

    # 6: Winograd's workspace
    wino, cmd = cmds["winograd"][-1][0], shown["winograd"]
    if missing(rows, wino, cmd, "Winograd takes 20-30% more memory"):
        from cudnn_explorer.core.analysis import min_bytes
        from cudnn_explorer.core.exploration import Exploration

        with open(wino) as f:
            exp = Exploration.from_json(f.read())
        parts = []
        ratios = []  # Winograd's workspace over the direction's tensors: the memory it adds
        for d in exp.directions:
            w = [r.workspace_bytes for r in d.find if r.ok and "WINOGRAD" in r.algo_name]
            other = sorted(r.workspace_bytes for r in d.find
                           if r.ok and "WINOGRAD" not in r.algo_name)
            eng = [c.workspace_bytes for c in (d.engines.configs if d.engines else [])
                   if c.ok and "WINOGRAD" in c.numeric_notes]
            if not (w or eng):
                continue
            tensors = min_bytes(exp.problem, d.direction)
            most = max(w + eng)
            ratios.append(most / tensors)
            text = (f"{d.direction}: Winograd's workspace up to {most / 2**20:.1f} MiB, "
                    f"{pct(most / tensors)} over the {tensors / 2**20:.1f} MiB of its tensors")
            if other:
                text += (f" (the other algorithms' median workspace "
                         f"{other[len(other) // 2] / 2**20:.1f} MiB)")
            parts.append(text)
        rows.append(["Winograd takes 20-30% more memory",
                     "; ".join(parts) or "no Winograd algorithm or engine config ran for this "
                                         "problem",
                     ("holds" if all(0.2 <= x <= 0.3 for x in ratios) else "does not hold")
                     if ratios else "untested", cmd])

    # 7: different cards: the store's comparison when it holds more than one environment,
    # else cuDNN's own deviceless heuristics for the shipped GPU profiles (not measured)
    text = ""
    for name in ("compare.txt", "targets.txt"):
        if os.path.exists(os.path.join(keep, name)):
            with open(os.path.join(keep, name)) as f:
                text += " ".join(f.read().split()) + "\n"
    at = text.find("PyTorch's benchmark pick is the same in every environment")
    heur = re.search(r"all (\d+) targets pick the same engine for (\d+) of (\d+) "
                     r"problem-directions", text)
    if at >= 0:
        rows.append(["different cards choose differently", text[at:].splitlines()[0],
                     "see the comparison", shown["compare"]])
    elif heur:
        n, same, total = heur.groups()
        version = re.search(r"from cuDNN ([\d.]+)'s deviceless heuristics", text)
        rows.append(["different cards choose differently",
                     f"measured on this GPU only. cuDNN's deviceless heuristics (not measured"
                     f"{', cuDNN ' + version.group(1) if version else ''}) for {n} GPU "
                     f"profiles give PyTorch's heuristic pick the same engine on all {n} for "
                     f"{same} of {total} ResNet-50 problem-directions",
                     "untested beyond this GPU; the heuristics say "
                     + ("yes" if int(same) < int(total) else "no"), shown["targets"]])
    else:
        rows.append(["different cards choose differently", "not measured", "untested",
                     shown["targets"]])
    return rows


def pinned_cells(keep, cmds, shown):
    """The pinned column, per claim: what the workload pinned to its own sweep's plans
    measured (the pinned steps' advice), or why it was not."""
    cells = {}

    def advice(step):  # (the advice, its costs) or (None, why not)
        path = cmds[step][-1][0]
        if not finished(path):
            return None, not_measured(keep, cmds, step)
        adv = load_advice(path)
        costs = adv.costs()
        return (adv, costs) if costs and all(c.has_pinned for c in costs) else (
            None, "not measured: the pinned mode did not run at every size (log.txt)")

    adv, costs = advice("r50-pinned")
    how = f" (`{shown['r50-pinned']}`)"
    r50 = ["ResNet-50 at 224 runs 15-23% faster per iteration with benchmark on",
           "memory is basically unchanged with benchmark on",
           "(measured here) PyTorch's benchmark pick is stable from run to run"]
    if adv is None:
        cells.update((claim, costs) for claim in r50)
    else:
        c, v = costs[0], verdict(costs, adv.iterations)
        (d, lo, hi), (e, elo, ehi) = v.pinned_vs_off, v.pinned_vs_on
        off, on = c.mean_off, c.mean_on
        cells[r50[0]] = (f"pinned saves {pct(d / off)} of the steady iteration against off "
                         f"(95% CI {pct(lo / off)} to {pct(hi / off)}) and {pct(e / on)} "
                         f"against on ({pct(elo / on)} to {pct(ehi / on)}; "
                         f"{STEPS_BY[c.method]}); the advice: '{v.choice}'" + how)
        cells[r50[1]] = (f"first-iteration peak reserved {c.peak_pinned_bytes / GIB:.2f} GiB "
                         f"pinned, {c.peak_off_bytes / GIB:.2f} GiB off, "
                         f"{c.peak_on_bytes / GIB:.2f} GiB on" + how)
        cells[r50[2]] = (f"{c.pinned_calls} of {c.pinned_calls + c.fallback_calls} "
                         f"first-iteration convolution calls ran the plan file's plans, with "
                         f"no search" + how)
    adv, costs = advice("det-pinned")
    cells["deterministic mode costs about 20%"] = costs if adv is None else \
        deterministic_cell(adv, costs, shown["det-pinned"])
    for step, claim in (("sizes-pinned", "with variable input sizes benchmark mode runs "
                                         "about 8% slower"),
                        ("dist80-pinned", "turn benchmark on when at least 80% of inputs "
                                          "share one shape")):
        adv, costs = advice(step)
        if adv is None:
            cells[claim] = costs
            continue
        v = verdict(costs, adv.iterations)
        ran, fell = (sum(c.pinned_calls for c in costs), sum(c.fallback_calls for c in costs))
        cells[claim] = (f"expected total {v.total_pinned_ms / 1e3:.1f} s pinned, "
                        f"{v.total_on_ms / 1e3:.1f} s on, {v.total_off_ms / 1e3:.1f} s off "
                        f"for {adv.iterations} iterations over {len(costs)} sizes"
                        + (", no search at any" if not fell else "")
                        + f"; {ran} of {ran + fell} first-iteration calls pinned; the "
                        f"advice: '{v.choice}' (`{shown[step]}`)")
    cells["Winograd takes 20-30% more memory"] = (
        "not measured: a plan file holds the configs its sweep chose; `plans write "
        "--max-workspace MiB` keeps only those within a workspace")
    cells["different cards choose differently"] = (
        "a plan file names its GPU, compute capability, cuDNN, cudnn-frontend and torch; "
        "pinning it elsewhere is refused, naming what differs (tested without a GPU)")
    return cells


def median_cost(run, mode, against):
    """(the median steady iteration of ``mode`` over that of ``against``, less 1; the
    samples of each; how they were timed) in the model run ``run`` (its first size), the
    samples made comparable; None where either mode has none."""
    a, b = run.mode(mode), run.mode(against)
    if not (a and b and a.sizes[0].steady and b.sizes[0].steady):
        return None
    xs, ys, how = comparable(a.sizes[0].steady, b.sizes[0].steady)
    return statistics.median(xs) / statistics.median(ys) - 1, len(xs), len(ys), how


def deterministic_cell(adv, costs, shown_cmd) -> str:
    """The deterministic claim's pinned cell: the step pinned to a plan file of
    deterministic configs only, against deterministic mode's own picks (the medians of
    one process each, as the measured column) and against benchmark off (the advice's
    difference of means, with its 95% CI)."""
    c, v = costs[0], verdict(costs, adv.iterations)
    d, lo, hi = v.pinned_vs_off
    off = c.mean_off
    found = median_cost(adv.pytorch_run, "pinned", "deterministic")
    vs_det = ""
    if found is not None:
        cost, n_pin, n_det, how = found
        vs_det = (f" and {pct(cost)} against deterministic mode's own picks (medians of "
                  f"{n_pin} and {n_det} {STEPS_BY[how]}, one process each)")
    return (f"pinned to the sweep's deterministic configs only (`plans write "
            f"--deterministic`; cudnn.deterministic not set, which changes no pinned call), "
            f"the steady iteration costs {pct(-d / off)} against "
            f"benchmark off (95% CI {pct(-hi / off)} to {pct(-lo / off)}; "
            f"{STEPS_BY[c.method]}){vs_det}; {c.pinned_calls} of "
            f"{c.pinned_calls + c.fallback_calls} first-iteration calls pinned "
            f"(`{shown_cmd}`)")


def not_measured(keep, cmds, step) -> str:
    """Why a chained step has no result: the first of its commands without its file, and
    its exit status where the log has it."""
    args = next(a for p, a in cmds[step] if not finished(p))
    rc = exit_status(keep, shown_command(args, keep))
    return f"not measured: `{args[0]} {args[1]}` exited {rc} (log.txt in the results " \
        f"folder)" if rc is not None else f"not measured: step {step} has not run to its end here"


def exit_status(keep, cmd):
    """The last exit status log.txt in ``keep`` records for the command ``cmd`` (None:
    it never ended, or never ran)."""
    log, text = os.path.join(keep, "log.txt"), ""
    if os.path.exists(log):
        with open(log) as f:
            text = f.read()
    failed = re.findall(rf"^\$ {re.escape(cmd)}(?: .*)?\nexit (\d+)$", text, re.M)
    return failed[-1] if failed else None


def sizes_verdict(ratio: float, break_even) -> str:
    """The variable-sizes claim (about 8% slower) against ``ratio``, the expected total with
    benchmark on over that with it off, less 1."""
    if ratio <= 0.0:
        return "does not hold: faster with benchmark on"
    if ratio <= 0.16:
        return "holds"
    return "depends on the iterations per size: slower by far more here" + (
        f"; benchmark on pays off only after {break_even} iterations" if break_even
        else ", and never pays off")


def methods(costs) -> str:
    """How the sizes' steady iterations were timed, as the table says it."""
    by = {}
    for c in costs:
        by.setdefault(c.method, []).append(str(c.size))
    if len(by) == 1:
        return STEPS_BY[next(iter(by))]
    return "; ".join(f"{STEPS_BY[m]} for size {', '.join(sizes)}" for m, sizes in by.items())


def range_verdict(lo: float, hi: float, claim_lo: float, claim_hi: float) -> str:
    """A claimed range against a measured interval [lo, hi] (fractions)."""
    if claim_lo <= lo and hi <= claim_hi:
        return "holds"
    if hi < claim_lo or lo > claim_hi:
        return "does not hold"
    return (f"undecided: the interval ({pct(lo)} to {pct(hi)}) reaches beyond the claimed "
            f"{100 * claim_lo:.0f}-{100 * claim_hi:.0f}%")


def missing(rows, path, cmd, claim) -> bool:
    """False (and a row saying so) when the step's file is not there; True to go on. The
    log in the results folder tells a command that failed (its exit status is logged)
    from one that never ended."""
    if finished(path):
        return True
    rc = exit_status(os.path.dirname(path), cmd)
    rows.append([claim, f"not measured: the command exited {rc} (its output: log.txt "
                        f"in the results folder)" if rc is not None else
                        "not measured: the command has not run to its end here",
                 "untested", cmd])
    return False


if __name__ == "__main__":
    sys.exit(main())
