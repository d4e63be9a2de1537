"""The plans job: a plan file from a model sweep, from saved explorations, or from the
results store; and a plan file read back and checked against this machine."""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

from ..core.documents import read_saved
from ..core.errors import UserError
from ..core.exploration import Environment, Exploration, check_env_filters
from ..core.files import read_bytes
from ..core.options import ExploreOptions
from ..core.plans import PlanFile, plans_from
from ..core.schema import utc_now
from ..core.version import __version__

__all__ = ["write_plans", "read_plans", "environment_here", "check_pinned_args",
           "pinned_mode"]


def _one_environment(exps: Sequence[Exploration], what: str) -> Environment:
    from ..store.db import env_key

    envs = {env_key(e.environment): e.environment for e in exps}
    if not envs:
        raise UserError(f"{what}: no measured problem to make plans of")
    if len(envs) > 1:
        names = sorted({f"{e.gpu_name} (cuDNN {e.cudnn_runtime})" for e in envs.values()})
        raise UserError(f"{what}: results of {len(envs)} environments ({', '.join(names)}): "
                        f"a plan file holds one; narrow them with --gpu / --cudnn")
    return next(iter(envs.values()))


def write_plans(source: Optional[str] = None, *, store: Optional[str] = None,
                policy: str = "best", max_workspace_mib: Optional[float] = None,
                deterministic: bool = False, gpus: Sequence[str] = (),
                cudnns: Sequence[str] = ()) -> PlanFile:
    """The PlanFile of a saved model sweep or exploration file at ``source`` (its layers
    and calls per iteration kept with each plan for a sweep), or of the results store
    at ``store`` (filtered by GPU name and cuDNN version to one environment)."""
    if max_workspace_mib is not None:  # checked as the option is (a number >= 0)
        max_workspace_mib = ExploreOptions.create(
            max_workspace_mib=max_workspace_mib).max_workspace_mib
    cap = None if max_workspace_mib is None else int(max_workspace_mib * 2**20)
    if (source is None) == (store is None):
        raise UserError("plans write: give a saved sweep or exploration file, or --store")
    items: List[Tuple] = []
    if source is not None:
        sw, exps = read_saved(source, "plans write")
        check_env_filters([sw.environment] if sw is not None else [e.environment for e in exps],
                  gpus, cudnns, f"plans write '{source}'")
        if sw is not None:  # with each problem's layers and calls per iteration
            for e in sw.entries:
                if e.exploration is None:
                    continue
                u = sw.capture.problems[e.index]
                items += [(e.exploration.problem, d, u.layers, u.calls.get(d.direction, 0))
                          for d in e.exploration.directions]
            env, what = sw.environment, sw.capture.model.describe()
        else:
            exps = [e for e in exps if e.environment.matches(gpus, cudnns)]
            env, what = _one_environment(exps, f"plans write '{source}'"), source
            items = [(e.problem, d, [], 0) for e in exps for d in e.directions]
    else:
        from .saved import stored_explorations

        exps = stored_explorations(store or None)
        check_env_filters([e.environment for e in exps], gpus, cudnns, "plans write --store")
        exps = [e for e in exps if e.environment.matches(gpus, cudnns)]
        env, what = _one_environment(exps, "plans write --store"), "the results store"
        items = [(e.problem, d, [], 0) for e in exps for d in e.directions]
    return plans_from(items, env, what, policy, cap, deterministic, __version__, utc_now())


def read_plans(path: str) -> PlanFile:
    """The plan file at ``path``, every field checked (UserError names the file and the
    bad field)."""
    return _read(path)[0]


def _read(path: str) -> Tuple[PlanFile, bytes]:
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"plans {type(path).__name__}: give a plan file's path")
    data = read_bytes(path, "plan file")  # its errors name the file already
    try:
        return PlanFile.read(data, "plan file"), data
    except UserError as e:
        from ..core.documents import kind_hint

        raise UserError(f"plan file '{path}': {e}"
                        f"{kind_hint(data, 'cudnn_explorer.plans')}") from None


def environment_here(device: int = 0) -> Environment:
    """This GPU's environment (measure.pipeline.environment; MissingDependencyError when
    there is no GPU or extension)."""
    from . import lazy_measure

    lazy_measure.require_driver()
    return lazy_measure.measuring().environment(device)


def check_pinned_args(plans: Optional[str], uncovered: str) -> None:
    """A job's plan file (read and checked, when given) and ``uncovered`` ("off" or "on"):
    UserError naming the bad one, before any model runs."""
    _check_uncovered(uncovered)
    if plans:
        _read(plans)


def _check_uncovered(uncovered: str) -> None:
    """UserError unless ``uncovered`` is "off" or "on"."""
    if uncovered not in ("off", "on"):
        raise UserError(f"uncovered {uncovered!r}: valid: off, on (benchmark mode for the "
                        f"convolutions the plan file does not cover)")


def pinned_mode(path: str, env: Environment, uncovered: str = "off",
                allow_environment: bool = False):
    """The pinned mode of PyTorch's run of a model (measure.pytorch_picks.ModeSpec) with the
    plan file at ``path``: checked, and refused (UserError naming what differs) when it
    comes from another environment than ``env`` unless ``allow_environment``; the
    convolutions it does not cover run with benchmark ``uncovered`` ("off" or "on"). The
    hash of its contents keys the mode's runs in the results store."""
    import hashlib

    from ..measure.pytorch_picks import ModeSpec

    _check_uncovered(uncovered)
    plans, data = _read(path)
    diffs = plans.differences(env)
    if diffs and not allow_environment:
        raise UserError(f"plan file '{path}' from another environment: {'; '.join(diffs)} "
                        f"(--allow-environment uses it anyway)")
    sha = hashlib.sha256(data).hexdigest()
    return ModeSpec(f"pinned (uncovered: benchmark {uncovered})", "pinned",
                    plans=os.path.abspath(path), plans_sha=sha,
                    benchmark=uncovered == "on"), plans
