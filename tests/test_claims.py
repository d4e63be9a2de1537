"""scripts/claims.py's table from saved results (no GPU): the verdict rules, and the rows
an H200 advice for ResNet-50 gives (steps without a result say so)."""
import gzip
import os
import shutil
import subprocess
import sys

from conftest import REPO, load_script

FIXTURE = os.path.join(REPO, "tests", "fixtures", "advice_r50_b32_fp32_h200.json.gz")
SIZES = os.path.join(REPO, "tests", "fixtures", "advice_r50_b16_sizes_h200.json.gz")
DIST80 = os.path.join(REPO, "tests", "fixtures", "advice_r50_b16_dist80_h200.json.gz")
# advise resnet50 --batch 32 --plans FILE --iterations 10000 on the H200 (2026-12-02), the
# plan file from the quick profile's sweep of the same workload
PINNED = os.path.join(REPO, "tests", "fixtures", "advice_r50_b32_fp32_pinned_h200.json.gz")
# advise resnet50 --batch 16 --sizes 320:576:64 --iterations 1000 --plans FILE on the H200
# (2026-12-02), the plan file from the sweep of the same five sizes
SIZES_PINNED = os.path.join(REPO, "tests", "fixtures",
                            "advice_r50_b16_sizes_pinned_h200.json.gz")
# the det-pinned step (plans write --deterministic) on an H200, 2026-12-03
DET_PINNED = os.path.join(REPO, "tests", "fixtures",
                          "advice_r50_b32_fp32_det_pinned_h200.json.gz")
# the dist80-pinned step on an H200, 2026-12-03: advise resnet50 --batch 16 --shape-dist
# dist80.txt --iterations 10000 --plans FILE, the plan file from the sweep of its five sizes
DIST80_PINNED = os.path.join(REPO, "tests", "fixtures",
                             "advice_r50_b16_dist80_pinned_h200.json.gz")


def _claims():
    return load_script("claims")


def test_range_verdict():
    v = _claims().range_verdict
    assert v(0.16, 0.22, 0.15, 0.23) == "holds"
    assert v(-0.05, 0.10, 0.15, 0.23) == "does not hold"
    assert v(0.24, 0.30, 0.15, 0.23) == "does not hold"
    assert v(0.10, 0.20, 0.15, 0.23).startswith("undecided: the interval (+10.0% to +20.0%)")
    assert v(-0.22, 0.16, 0.15, 0.23).startswith("undecided")


def table_from(tmp_path, fixtures):
    """claims.py's table (the file it wrote) from ``fixtures`` [(gzipped result, the name
    its step gives it)] put in a results folder; (the run, the table's path)."""
    for src, name in fixtures:
        with gzip.open(src) as f, open(tmp_path / name, "wb") as g:
            shutil.copyfileobj(f, g)
    return table_of(tmp_path)


def table_of(keep):
    """claims.py --table-only over the results in ``keep``: (the run, the table's path)."""
    out = keep / "claims.md"
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "claims.py"),
                        "--table-only", "--keep", str(keep), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r, out


def claim_row(out, claim: str) -> str:
    """The table's row of the claim that starts with ``claim``."""
    return next(ln for ln in out.read_text().splitlines() if ln.startswith(f"| {claim}"))


def test_table_from_an_h200_advice(tmp_path):
    r, out = table_from(tmp_path, (
        (FIXTURE, "resnet50_224.json"), (SIZES, "resnet50_sizes.json"),
        (DIST80, "resnet50_80.json"), (PINNED, "resnet50_224_pinned.json"),
        (SIZES_PINNED, "resnet50_sizes_pinned.json")))
    text = out.read_text()
    assert "on NVIDIA H200, torch 2.11.0+cu130, cuDNN 9.19.0." in text
    # measured, verdict, pinned to a plan file, command
    rows = {cells[1].strip(): [c.strip() for c in cells[2:6]]
            for cells in (ln.split("|") for ln in text.splitlines()[6:]) if len(cells) > 5}
    assert len(rows) == 8
    speed = rows["ResNet-50 at 224 runs 15-23% faster per iteration with benchmark on"]
    assert "(95% CI -0.6% to -0.4%)" in speed[0] and "CUDA-graph replays" in speed[0]
    assert speed[1] == "does not hold"
    # the pinned column: the same workload pinned to its sweep's plans (its own advice)
    assert speed[2].startswith(
        "pinned saves +0.2% of the steady iteration against off (95% CI +0.1% to +0.4%) and "
        "+1.0% against on (+0.9% to +1.1%; CUDA-graph replays of the whole step: GPU time); "
        "the advice: 'pinned' (`python -m cudnn_explorer model resnet50 --batch 32 --json "
        "resnet50_224_pinned.sweep.json; python -m cudnn_explorer plans write "
        "resnet50_224_pinned.sweep.json -o resnet50_224_pinned.plans.json; python -m "
        "cudnn_explorer advise resnet50 --batch 32 --iterations 10000 --plans"), speed[2]
    memory = rows["memory is basically unchanged with benchmark on"]
    assert "7.51 GiB on vs 3.44 GiB off" in memory[0] and memory[1] == "does not hold"
    assert memory[2].startswith("first-iteration peak reserved 3.44 GiB pinned, 3.44 GiB off, "
                                "7.51 GiB on")
    det = rows["deterministic mode costs about 20%"]
    assert det[0].startswith("-0.5% per iteration") and det[1] == "does not hold"
    assert det[2].startswith("not measured: "), det[2]  # no det-pinned step here
    stable = rows["(measured here) PyTorch's benchmark pick is stable from run to run"]
    assert stable[0].startswith("29 of 68 problem-directions") and stable[1] == "does not hold"
    assert stable[2].startswith("158 of 158 first-iteration convolution calls ran the plan "
                                "file's plans, with no search")
    # five sizes: far slower than the claim over 1000 iterations, the steady iterations a
    # little faster; two sizes' steps were graph replays, three eager
    sizes = rows["with variable input sizes benchmark mode runs about 8% slower"]
    assert sizes[0].startswith("+92.8% expected total for 1000 iterations over 5 sizes "
                               "(65.9 s on, 34.2 s off)"), sizes
    # the search's cost: each size's first iteration over its steady ones, on less off
    assert "first iteration costs 4.5-7.8 s more with benchmark on than off" in sizes[0]
    assert "steady iterations are +0.7% to +1.6% faster" in sizes[0]
    assert "GPU time for size 320, 384; eager steps" in sizes[0]
    assert sizes[1] == ("depends on the iterations per size: slower by far more here; "
                        "benchmark on pays off only after 96588 iterations")
    # pinned to the five sizes' plan file: no search at any size, every call pinned
    assert sizes[2].startswith(
        "expected total 32.4 s pinned, 67.7 s on, 33.3 s off for 1000 iterations over 5 "
        "sizes, no search at any; 790 of 790 first-iteration calls pinned; the advice: "
        "'pinned' (`python -m cudnn_explorer model resnet50 --batch 16 --sizes 320:576:64 "), sizes
    # 80% of the inputs at one size: the steady saving with its CI, the search cost, the
    # totals, the advice (all five sizes graph-timed)
    rule = rows["turn benchmark on when at least 80% of inputs share one shape"]
    assert rule[0] == (
        "80% of inputs at 224, 5% at each of 4 others, 10000 iterations: benchmark on saves "
        "-0.8% of the steady iteration (95% CI -0.9% to -0.7%; CUDA-graph replays of the "
        "whole step: GPU time), its first iterations cost 39.1 s more over the 5 sizes than "
        "with it off; expected total 149.3 s on, 109.4 s off: the advice is 'off' (benchmark "
        "on never pays off)"), rule
    assert rule[1] == "does not hold here"
    # a step whose command failed says so, with its exit status from the log
    os.remove(tmp_path / "resnet50_80.json")
    with open(tmp_path / "log.txt", "w") as f:
        f.write(f"$ {rule[3].strip('`')} --store results.db\nexit 3\nout\nerr\n"
                "$ python -m cudnn_explorer plans write resnet50_80_pinned.sweep.json -o "
                "resnet50_80_pinned.plans.json"
                "\nexit 2\n")
    (tmp_path / "resnet50_80_pinned.sweep.json").write_text('{"complete": true}')
    _, out = table_of(tmp_path)
    assert ("| turn benchmark on when at least 80% of inputs share one shape | not measured: "
            "the command exited 3 (its output: log.txt in the results folder) | untested | "
            "not measured: `plans write` exited 2 (log.txt in the results folder) |"
            ) in out.read_text()
    assert "advise resnet50 --batch 32" in speed[3] and str(tmp_path) not in text


def test_every_measuring_command_keeps_its_results_in_the_store_given(tmp_path, monkeypatch):
    """A step cut short resumes from the store in --keep (advise's runs of the model), so
    every command that keeps results gets it; the deviceless heuristics keep none, and
    take none; the table shows the commands as a user types them."""
    claims = _claims()
    ran = []
    monkeypatch.setattr(claims, "cli", lambda args, keep: ran.append(args) or
                        subprocess.CompletedProcess(args, 1, "", ""))
    keep, store = str(tmp_path), str(tmp_path / "results.db")
    cmds = claims.commands(keep, "32")
    for step in claims.STEPS:
        for path, args in cmds[step]:
            claims.measure(path, args, keep, 1, store)
    # each pinned step: a sweep, its plan file and advise with it
    # (every command fails here, so the deterministic step sweeps again: a sweep it shares
    # with r50-pinned is made once when it is there)
    assert sorted(a[0] for a in ran) == ["--shape"] + ["advise"] * 7 + ["compare"] + \
        ["model"] * 5 + ["plans"] * 4
    det = [a for a in ran if a[0] == "plans" and "--deterministic" in a]
    assert len(det) == 1 and det[0][2].endswith("resnet50_224_pinned.sweep.json")
    for args in ran:
        if "--target" in args or args[0] == "plans":
            assert "--store" not in args and "--device" not in args, args
        else:
            assert args[args.index("--store") + 1] == store, args
    assert all("--store" not in claims.shown_command(a, keep)
               for step in cmds for _, a in cmds[step])
    advise = [a for a in ran if a[0] == "advise" and "--plans" in a]
    assert [a[a.index("--plans") + 1] == os.path.join(keep, n + ".plans.json")
            for a, n in zip(advise, ("resnet50_224_pinned", "resnet50_224_det_pinned",
                                     "resnet50_sizes_pinned", "resnet50_80_pinned"))
            ] == [True] * 4
    dist80 = next(a for a in ran if a[0] == "model" and "224,256,288,320,352" in a)
    assert dist80[:5] == ["model", "resnet50", "--batch", "16", "--sizes"]
    # a step whose file is there runs nothing
    ran.clear()
    (tmp_path / "winograd.json").write_text("{}")
    claims.measure(*cmds["winograd"][0], keep, 1, store)
    assert ran == []
    # one cut short (what had finished, "complete": false) or unreadable runs again
    sweep, args = cmds["sizes-pinned"][0]
    for text in ('{"complete": false, "entries": []}', '{"complete": fa'):
        with open(sweep, "w") as f:
            f.write(text)
        claims.measure(sweep, args, keep, 1, store)
    assert [a[:2] for a in ran] == [["model", "resnet50"]] * 2
    ran.clear()
    with open(sweep, "w") as f:
        f.write('{"complete": true, "entries": []}')
    claims.measure(sweep, args, keep, 1, store)
    assert ran == []


def test_winograd_row_weighs_its_workspace_against_the_tensors(tmp_path):
    """The Winograd claim from a real exploration (the H200 reference of 32x3x224x224 with
    a 3x3 kernel, float32): per direction, the largest Winograd workspace, legacy or
    engine config, over the direction's tensors (x, w, y: 410.4 MiB), beside the other
    algorithms' median workspace."""
    shutil.copy(os.path.join(REPO, "data", "reference", "h200-default-fp32.json"),
                tmp_path / "winograd.json")
    _, out = table_of(tmp_path)
    row = claim_row(out, "Winograd takes 20-30% more memory |")
    cells = [c.strip() for c in row.split("|")]
    assert cells[2].startswith("fwd: Winograd's workspace up to 923.4 MiB, +225.0% over the "
                               "410.4 MiB of its tensors (the other algorithms' median "
                               "workspace 0.0 MiB); bwd-data:"), cells[2]
    assert "bwd-filter: Winograd's workspace up to 923.4 MiB" in cells[2]
    assert cells[3] == "does not hold"


def test_the_deterministic_claims_pinned_cell(tmp_path):
    """The det-pinned step's H200 advice (pinned to its sweep's deterministic configs)
    against benchmark off with its CI, and against deterministic mode's own picks from the
    same advice."""
    _, out = table_from(tmp_path, ((FIXTURE, "resnet50_224.json"),
                                   (DET_PINNED, "resnet50_224_det_pinned.json")))
    row = claim_row(out, "deterministic mode costs about 20%")
    assert (" | pinned to the sweep's deterministic configs only (`plans write "
            "--deterministic`; cudnn.deterministic not set, which changes no pinned call), "
            "the steady iteration costs -0.2% against benchmark off (95% CI "
            "-0.3% to -0.1%; CUDA-graph replays of the whole step: GPU time) and -0.2% "
            "against deterministic mode's own picks (medians of 10 and 10 CUDA-graph replays "
            "of the whole step: GPU time, one process each); 158 of 158 first-iteration calls "
            "pinned (`python -m cudnn_explorer model resnet50 --batch 32 --json "
            "resnet50_224_pinned.sweep.json; python -m cudnn_explorer plans write "
            "resnet50_224_pinned.sweep.json -o resnet50_224_det_pinned.plans.json "
            "--deterministic; ") in row, row


def test_the_80_percent_claims_pinned_cell(tmp_path):
    """The dist80-pinned step's H200 advice: the expected totals of the three modes, the
    calls pinned, the advice, the commands; "no search at any" only where every call was
    pinned."""
    import json

    _, out = table_from(tmp_path, ((DIST80, "resnet50_80.json"),
                                   (DIST80_PINNED, "resnet50_80_pinned.json")))
    row = claim_row(out, "turn benchmark on when at least 80% of inputs")
    assert ("| expected total 108.4 s pinned, 125.9 s on, 110.2 s off for 10000 iterations over "
            "5 sizes, no search at any; 790 of 790 first-iteration calls pinned; the advice: "
            "'pinned' (`python -m cudnn_explorer model resnet50 --batch 16 --sizes "
            "224,256,288,320,352 --json resnet50_80_pinned.sweep.json; python -m "
            "cudnn_explorer plans write resnet50_80_pinned.sweep.json -o "
            "resnet50_80_pinned.plans.json; python -m cudnn_explorer advise resnet50 --batch "
            "16 --shape-dist dist80.txt --iterations 10000 --plans "
            "resnet50_80_pinned.plans.json --json resnet50_80_pinned.json`) |") in row, row
    # a call the file did not cover: the cell does not say "no search at any"
    path = tmp_path / "resnet50_80_pinned.json"
    d = json.loads(path.read_text())
    text = json.dumps(d)
    assert '"fallback_calls": 0' in text
    path.write_text(text.replace('"fallback_calls": 0', '"fallback_calls": 1', 1))
    _, out = table_of(tmp_path)
    row = claim_row(out, "turn benchmark on when at least 80% of inputs")
    assert "over 5 sizes; 790 of 791 first-iteration calls pinned" in row, row

