"""The option groups that more than one verb takes, and what they read into: the run and
measurement options (one ExploreOptions), the model and its input (one ModelSpec), the
results store, and the environment filters."""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..core.capture import ModelSpec
from ..core.errors import UserError
from ..core.options import ExploreOptions, parse_int
from ..jobs.stores import StoreChoice
from .args import Group, Needs, Parser, Refuse

__all__ = ["RUN_FLAGS", "add_run_args", "options_from_args", "add_model_args",
           "model_spec_from_args", "add_env_filters", "store_choice", "store_read"]

RUN_FLAGS = ("--direction", "--device", "--max-workspace", "--seed", "--budget-ms",
             "--flush-l2", "--no-retime", "--no-graph", "--no-check", "--quiet", "--verbose",
             "--no-pytorch", "--benchmark-limit", "--child-timeout", "--no-engines",
             "--engine-configs", "--engine-config-timeout", "--engine-budget-s", "--profile",
             "--store", "--no-store", "--refresh")
# Flags that change nothing about what a run measures or where it keeps it: never
# refused as "would be ignored" (a script may always pass them).
HARMLESS = ("--quiet", "--verbose", "--debug")


def run_rules(pytorch_flags=()) -> list:
    """The conflicts between the run options (add_run_args), for every verb that takes
    them; ``pytorch_flags``: the verb's own flags that only PyTorch's runs use."""
    return [
        Refuse("--quiet", ("--verbose",), "--quiet turns progress off"),
        Refuse("--no-pytorch", ("--benchmark-limit", "--child-timeout") + tuple(pytorch_flags),
               "--no-pytorch runs none of PyTorch's modes"),
        Refuse("--no-engines", ("--engine-configs", "--engine-config-timeout",
                                "--engine-budget-s"),
               "--no-engines explores no engine configs"),
        Refuse("--no-retime", ("--budget-ms", "--flush-l2", "--no-graph"),
               "--no-retime times nothing"),
        Refuse("--no-store", ("--store", "--refresh"), "--no-store uses no store"),
    ]


PROFILE_HELP = ("quick (default): a staged search of the legacy rows and the engine "
                "configs: every candidate timed briefly, those far behind the best leave, "
                "the finalists (PyTorch's picks always among them) timed with the full "
                "budget and checked (docs/method.md); thorough: every row and config timed "
                "with the full budget and checked")


def add_run_args(p: Parser, profile_help: str = PROFILE_HELP) -> Group:
    """The run, measurement, PyTorch and engine-config options, shared by the problem
    command and ``model`` (one ExploreOptions for both); returns the "run" group."""
    r = p.group("run")
    r.add("--profile", default="quick", help=profile_help)
    r.add("--device", default="0", help="CUDA device index (default 0)")
    r.add("--max-workspace", default=None, metavar="MiB",
          help="cap the workspace Find may use, in MiB")
    r.add("--seed", default="0", help="seed of the random input data")
    m = p.group("measurement")
    m.add("--budget-ms", default="100",
          help="GPU sampling time per re-timed row, in ms (default 100)")
    m.add("--flush-l2", action="store_true", help="clear the L2 cache before every timed launch")
    m.add("--no-retime", action="store_true",
          help="skip steady-state re-timing (show cudnnFind's own times only)")
    m.add("--no-graph", action="store_true",
          help="time eager back-to-back launches instead of CUDA-graph replays")
    m.add("--no-check", action="store_true",
          help="skip checking each algorithm's output against a float64 reference")
    m.add("--quiet", action="store_true", help="no progress lines on stderr")
    m.add("--verbose", action="store_true",
          help="progress as plain lines on stderr, also when it is not a terminal")
    t = p.group("PyTorch's own choice (each mode in a fresh child process)")
    t.add("--no-pytorch", action="store_true",
          help="skip running PyTorch's own convolution in each mode")
    t.add("--benchmark-limit", default=None, metavar="N",
          help="torch.backends.cudnn.benchmark_limit for benchmark mode "
               "(default: PyTorch's, 10; 0 = time every candidate)")
    t.add("--child-timeout", default="300", metavar="S",
          help="seconds before a PyTorch child process is declared hung")
    e = p.group("cuDNN 9 engine configs", "explored by default when the extension was built "
                "with cudnn-frontend; the output ends with a per-direction summary")
    g = e.exclusive()
    g.add("--engines", action="store_true",
          help="also list every engine config tried, with its notes, workspace, build time "
               "and heuristic ranks (with --load: from the saved file)")
    g.add("--no-engines", action="store_true",
          help="skip the engine configs (legacy algorithms and PyTorch's pick only)")
    e.add("--engine-configs", default="8", metavar="N",
          help="at most N valid knob configs per engine (default 8; up to 16*N candidates "
               "are tried, most are invalid for a given problem)")
    e.add("--engine-config-timeout", default="60", metavar="S",
          help="seconds one config may take (build, timing, check) before it is recorded "
               "as hung and its worker process restarted (default 60); once its plan is "
               "built, less where its launches would be thousands of times the fastest "
               "config's so far (at least 3 s), or 10 s for a config known to hang "
               "(docs/limits.md)")
    e.add("--engine-budget-s", default="120", metavar="S",
          help="time budget per direction for building and timing configs (default 120)")
    st = p.group("results store (SQLite; a repeat answers from it)")
    add_store_args(st, "the store file (default ~/.cache/cudnn_explorer/results.db)",
                   "neither read nor save results",
                   "measure again even when the store has the answer (and save it)")
    return r


def add_plans_args(g, what: str) -> None:
    """--plans (a third mode of PyTorch's run of the model: ``what``), --uncovered and
    --allow-environment; PLANS_RULES says what they need."""
    g.add("--plans", default=None, metavar="FILE",
          help=f"a plan file (plans write): {what}")
    g.add("--uncovered", default=None, choices=("off", "on"),
          help="with --plans: benchmark mode for the convolutions the file does not cover "
               "(default off)")
    g.add("--allow-environment", action="store_true",
          help="with --plans: use a plan file measured on another GPU, cuDNN, "
               "cudnn-frontend or torch")


# Under torchrun each rank uses the GPU of its LOCAL_RANK (checked with the pseudo-flag
# TORCHRUN)
TORCHRUN_DEVICE = Refuse("TORCHRUN", ("--device",), "", text="--device would be ignored: under "
                         "torchrun each rank uses the GPU of its LOCAL_RANK")

PLANS_RULES = [
    Needs("--uncovered", ("--plans",), "--uncovered needs --plans (it sets benchmark mode "
                                       "for what the plan file does not cover)"),
    Needs("--allow-environment", ("--plans",), "--allow-environment needs --plans (it is "
                                               "about a plan file)"),
]


def checked_plans(path):
    """The plan file at ``path`` read and checked before any model runs (UserError naming
    the file and the bad field), or None when it is not given."""
    if path is None:
        return None
    if not path.strip():
        raise UserError(f"--plans '{path}': give a plan file's path (plans write makes one)")
    from ..jobs.plans import read_plans

    return read_plans(path)


def add_store_args(g, store_help: str, no_store_help: str, refresh_help: str) -> None:
    g.add("--store", default=None, metavar="PATH", help=store_help)
    g.add("--no-store", action="store_true", help=no_store_help)
    g.add("--refresh", action="store_true", help=refresh_help)


def options_from_args(a, engines: bool) -> ExploreOptions:
    """The one ExploreOptions of a command line (errors name the flag)."""
    return ExploreOptions.create(
        source="cli", directions=a.direction, device=a.device, seed=a.seed,
        max_workspace_mib=a.max_workspace, retime=not a.no_retime, budget_ms=a.budget_ms,
        flush_l2=a.flush_l2, graph=not a.no_graph, check=not a.no_check,
        pytorch=not a.no_pytorch, benchmark_limit=a.benchmark_limit,
        child_timeout_s=a.child_timeout, engines=engines, engine_configs=a.engine_configs,
        engine_budget_s=a.engine_budget_s,
        engine_config_timeout_s=a.engine_config_timeout).profiled(a.profile)


def store_read(store: Optional[str], used: bool = True) -> List[Tuple[Optional[str], str]]:
    """The results store a command reads, as check_output_path's ``reads``: ``store`` (""
    or None: the default file), nothing when the store is not ``used``."""
    if not used:
        return []
    from ..store.db import default_path

    return [(store or default_path(), "the results store")]


def store_choice(a) -> StoreChoice:
    """The results store the flags ask for."""
    return StoreChoice(getattr(a, "store", None), use=not getattr(a, "no_store", False),
                       refresh=getattr(a, "refresh", False))


def add_model_args(m: Group, sizes_help: str) -> None:
    """The model and its input, as ``model`` and ``advise`` take them (model_spec_from_args
    reads them)."""
    m.add("name", nargs="?", help="a torchvision model name, e.g. resnet50, or timm:NAME, "
                                  "e.g. timm:convnext_tiny (pip install timm)")
    m.add("--model", metavar="PKG.MODULE:FACTORY",
          help="your own nn.Module: a function that returns it (called with --model-args)")
    m.add("--model-args", default=None, metavar="JSON",
          help="keyword arguments for the model's factory (or torchvision's or timm's), as "
               "a JSON object, e.g. '{\"num_classes\": 10}'")
    m.add("--inputs", default=None, metavar="PKG.MODULE:FN",
          help="your own inputs: FN(batch, input_shape, device) returns a tensor, a tuple "
               "of arguments, or a dict of keyword arguments for the model")
    m.add("--batch", default="32", help="batch size (default 32)")
    m.add("--input", default=None, metavar="CxHxW",
          help="one sample's shape (default 3x224x224; a timm model's own)")
    m.add("--image", default=None, metavar="N", help="same as --input 3xNxN")
    m.add("--sizes", default=None, metavar="A:B:STEP", help=sizes_help)
    m.add("--amp", default="off", help="off | fp16 | bf16 (torch.autocast)")
    m.add("--channels-last", action="store_true", help="model and input in channels_last")
    t = m.exclusive()
    t.add("--train", action="store_true",
          help="a training step: forward and backward (the default)")
    t.add("--eval", action="store_true", help="inference: forward only, eval mode")


def model_spec_from_args(a) -> ModelSpec:
    """The ModelSpec of ``model`` and ``advise``'s flags (errors name the flag)."""
    from ..model import zoo

    if bool(a.name) == bool(a.model):
        raise UserError("model: give a torchvision model name or --model pkg.module:factory "
                        "(one of them)")
    if a.model and ":" not in a.model:
        raise UserError(f"--model '{a.model}': expected pkg.module:factory")
    if a.image:
        n = parse_int(a.image, "--image", 1, 1 << 20)
        shape = (3, n, n)
    elif not a.input and a.name and a.name.startswith(zoo.TIMM):
        shape = zoo.timm_input(a.name) or (3, 224, 224)  # the model's pretrained config's
    else:
        shape = zoo.parse_input(a.input or "3x224x224")
    return ModelSpec.create(a.name or a.model, batch=parse_int(a.batch, "--batch", 1, 1 << 20),
                            input_shape=shape, amp=a.amp, channels_last=a.channels_last,
                            train=not a.eval, source="cli",
                            sizes=zoo.parse_sizes(a.sizes) if a.sizes is not None else None,
                            model_args=zoo.parse_model_args(a.model_args)
                            if a.model_args is not None else None, inputs=a.inputs or "")


def add_env_filters(p: Parser) -> None:
    """--gpu and --cudnn, which Environment.matches applies."""
    p.add("--gpu", action="append", default=[], metavar="TEXT",
          help="only environments whose GPU name contains TEXT (repeatable)")
    p.add("--cudnn", action="append", default=[], metavar="VERSION",
          help="only these cuDNN versions, e.g. 9.19.0 or 91900 (repeatable)")


def positional(flags: List[str], a, name: str = "name") -> List[str]:
    """``flags`` with "NAME" added when the positional model name was given."""
    return flags + (["NAME"] if getattr(a, name, None) else [])
