"""Check deviceless heuristics against the device: on a GPU, for each problem and direction,
compare cuDNN's mode-A list from this GPU's own dumped profile (no handle) with the list
cuDNN gives on the device (operation graph built on PyTorch's handle).

    python scripts/check_targets.py [--json out.json]

Prints, per problem and direction, whether the full lists are identical, whether the top
candidates agree, and where they first differ; then whether PyTorch's own heuristic-mode
pick (run in a fresh process, benchmark off) is the deviceless heuristic pick; then the
totals. Exit status 0 when every top candidate agreed. Needs the GPU; the profile is the
GPU's own (--dump-device-profile), and the shipped profile of the same GPU is compared too
when there is one.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from cudnn_explorer.core.problem import DIRECTIONS, ConvProblem
from cudnn_explorer.core.targets import DeviceProfile

# 24 problems: dtypes, layouts, kernels, strides, groups, 1-D and 3-D.
PROBLEMS = [
    dict(shape="32,3,224,224", kernel=3),
    dict(shape="32,64,56,56", out_channels=64, kernel=3, dtype="float16", layout="nhwc"),
    dict(shape="32,64,56,56", out_channels=256, kernel=1, dtype="float16", layout="nhwc"),
    dict(shape="32,256,56,56", out_channels=128, kernel=1, stride=2, dtype="bfloat16",
         layout="nhwc"),
    dict(shape="32,128,28,28", out_channels=128, kernel=3, layout="nhwc", dtype="float16"),
    dict(shape="16,512,14,14", out_channels=512, kernel=3),
    dict(shape="16,512,14,14", out_channels=512, kernel=3, tf32=False),
    dict(shape="8,1024,7,7", out_channels=2048, kernel=1, dtype="bfloat16"),
    dict(shape="32,64,56,56", out_channels=64, kernel=3, groups=64, dtype="float16",
         layout="nhwc"),
    dict(shape="32,96,112,112", out_channels=96, kernel=3, groups=96, stride=2),
    dict(shape="8,32,8,28,28", out_channels=64, groups=4, layout="nhwc", dtype="float16"),
    dict(shape="4,16,16,32,32", out_channels=32, kernel=3),
    dict(shape="64,80,1000", out_channels=160, kernel=5),
    dict(shape="64,256,400", out_channels=256, kernel=3, dilation=2, padding=2,
         dtype="float16"),
    dict(shape="8,3,512,512", out_channels=32, kernel=7, stride=2, dtype="float16",
         layout="nhwc"),
    dict(shape="8,64,128,128", out_channels=64, kernel=3, dilation=2, padding=2),
    dict(shape="1,64,56,56", out_channels=64, kernel=3, dtype="float16", layout="nhwc"),
    dict(shape="128,64,28,28", out_channels=128, kernel=3, stride=2, dtype="float16",
         layout="nhwc"),
    dict(shape="16,256,32,32", out_channels=256, kernel=5, dtype="bfloat16", layout="nhwc"),
    dict(shape="16,3,32,32", out_channels=16, kernel=3, dtype="float64"),
    dict(shape="32,48,56,56", out_channels=48, kernel=1, dtype="float16", layout="nhwc"),
    dict(shape="32,40,28,28", out_channels=240, kernel=1, dtype="float16", layout="nhwc"),
    dict(shape="32,240,28,28", out_channels=240, kernel=5, groups=240, dtype="float16",
         layout="nhwc"),
    dict(shape="2,320,64,64", out_channels=320, kernel=3, dtype="float16", layout="nhwc"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--no-pytorch", action="store_true",
                    help="skip PyTorch's own heuristic-mode run of each problem")
    a = ap.parse_args()

    from cudnn_explorer.core.errors import ChildError
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.core.targets import load_profile
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.pytorch_picks import ModeRun, ModeSpec, pick_of, run_child
    from cudnn_explorer.measure.deviceless import dump_profile, rank_targets
    from cudnn_explorer.measure.tensors import make_tensors, native_problem

    own = DeviceProfile.parse(dump_profile(a.device), "this GPU")
    profiles = [own]
    try:
        shipped = load_profile(own.device_name.split()[-1].lower())
        if shipped.device_name == own.device_name:
            profiles.append(shipped)
    except Exception:  # noqa: BLE001  (no shipped profile of this GPU: compare the dump only)
        pass
    rows, tops, fulls, n = [], {p.key: 0 for p in profiles}, {p.key: 0 for p in profiles}, 0
    pt_same = pt_n = 0
    heuristic = ModeSpec("heuristics (benchmark off)", "heuristic")
    opts = ExploreOptions.create(device=a.device, retime=False, check=False)
    for kw in PROBLEMS:
        kw = dict(kw)
        problem = ConvProblem.create(kw.pop("shape"), **kw)
        ranks = rank_targets(problem, DIRECTIONS, profiles)
        run = None
        if not a.no_pytorch:  # PyTorch's own heuristic-mode pick, in a fresh process
            try:
                run = ModeRun(heuristic, run_child(problem, heuristic, opts))
            except ChildError as e:
                run = ModeRun(heuristic, None, str(e))
        for d in DIRECTIONS:
            tensors = make_tensors(problem, d, a.device)
            search = native.engine_search(d, native_problem(problem, tensors))
            on_device = list(search.heuristics("A"))
            del search, tensors
            n += 1
            row = dict(problem=problem.describe(), direction=d, on_device=on_device)
            for p in profiles:
                r = next(x for x in ranks if x.target == p.key and x.direction == d)
                dl = [x.name for x in r.a] if r.ok else []
                same_top = bool(dl) and bool(on_device) and dl[0] == on_device[0]
                tops[p.key] += same_top
                fulls[p.key] += dl == on_device
                first = next((i for i, (x, y) in enumerate(zip(dl, on_device)) if x != y),
                             None)
                row[p.key] = dict(deviceless=dl, status=r.status, same_top=same_top,
                                  same_list=dl == on_device, first_difference=first)
                print(f"{p.key:10s} {d:10s} top {'same' if same_top else 'DIFFERENT'}, "
                      f"list {'same' if dl == on_device else f'differs at {first}'} "
                      f"({len(dl)} vs {len(on_device)}): {problem.describe()[:70]}")
            if run is not None:
                own_r = next(x for x in ranks if x.target == own.key and x.direction == d)
                mine = own_r.heuristic_pick(problem.dtype, problem.tf32) if own_r.ok else None
                pick = pick_of(run, d)
                ran = pick.engine_tag.split("_", 1)[1] if pick.ok and pick.engine_tag else None
                same = bool(mine and ran and mine.name == ran)
                pt_n += bool(ran)
                pt_same += same
                row["pytorch_heuristic_pick"] = ran or f"none: {pick.error}"
                row["deviceless_heuristic_pick"] = mine.name if mine else None
                print(f"{'PyTorch':10s} {d:10s} heuristic pick "
                      f"{'same' if same else 'DIFFERENT'}: ran {ran}, deviceless "
                      f"{mine.name if mine else None}")
            rows.append(row)
    env = native.runtime_info()
    print()
    for p in profiles:
        print(f"{p.key}: top candidate agrees on {tops[p.key]} of {n} problem-directions, the "
              f"whole mode-A list on {fulls[p.key]} (cuDNN {env.get('cudnn')})")
    if not a.no_pytorch:
        print(f"PyTorch's measured heuristic-mode pick is the deviceless heuristic pick (this "
              f"GPU's profile) for {pt_same} of {pt_n} problem-directions it ran")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(cudnn=env.get("cudnn"), device=own.device_name, rows=rows,
                           top_agree={k: v for k, v in tops.items()},
                           list_agree={k: v for k, v in fulls.items()}, total=n,
                           pytorch_agree=None if a.no_pytorch else pt_same,
                           pytorch_total=None if a.no_pytorch else pt_n), f, indent=1)
    return 0 if all(v == n for v in tops.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
