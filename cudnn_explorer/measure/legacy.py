"""Legacy cuDNN algorithms of one direction: cudnnFind*Ex, cudnnGet*_v7, every
cudnnGet*WorkspaceSize, then each successful row re-timed, checked and, when asked, its
kernels read; every row is built once here, complete.

:class:`LegacyLab` holds one direction's GPU tensors, descriptors and reference; the
pipeline talks to it through four methods (find, measure, kernels, close), which is the
seam CPU tests replace with a fake (tests/fakes.py).
"""
from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional

from ..core import analysis
from ..core.errors import ResourceError
from ..core.options import ExploreOptions, TimingSpec
from ..core.problem import ConvProblem
from ..core.records import AlgoResult, Timing, WorkspaceEntry, find_row_note
from . import native
from .kernels import distinct, kernel_names
from .tensors import (OUTPUT_OF, Check, check_output, make_tensors, native_problem, reference,
                      tensor_bytes)
from .timing import timing_from_native

__all__ = ["LegacyLab", "LegacyRows", "measure_legacy"]


class LegacyLab:
    """One direction of ``problem`` on GPU ``device``: tensors (seeded), the extension's
    descriptors and, with ``check``, the float64 reference."""

    def __init__(self, problem: ConvProblem, direction: str, options: ExploreOptions):
        self.problem, self.direction = problem, direction
        self.tensors = make_tensors(problem, direction, options.device, options.seed)
        self.native = native_problem(problem, self.tensors)
        self.ref = None
        self._kernels = {}  # (algo, math type) -> kernels its timing's graph named
        if options.check:
            try:
                self.ref = reference(problem, direction, self.tensors)
            except RuntimeError as e:
                if not native.is_out_of_memory(e):
                    raise
                self.close()
                raise native.out_of_memory(
                    f"for the float64 reference of {direction} (--no-check skips it)",
                    tensor_bytes(problem, check=True), options.device) from None

    def find(self, cap_bytes: Optional[int]):
        """The native FindReport (csrc/find.h): Find under every math type the problem's
        dtype permits, PyTorch's first, with the workspace that fits."""
        return native.find_algorithms(self.direction, self.native,
                                      -1 if cap_bytes is None else cap_bytes,
                                      self.problem.find_math_types)

    def measure(self, algo: int, math_type: str, timing: Optional[TimingSpec],
                check: bool):
        """(Timing or None, Check or None) of one algorithm: re-timed with ``timing``
        (None: run once) and its output checked against the reference."""
        out = self.tensors[OUTPUT_OF[self.direction]]
        out.fill_(float("nan"))  # poison: an element the algorithm does not write stays NaN
        t = None
        if timing is not None:
            res = native.time_algorithm(self.direction, self.native, algo, math_type, timing,
                                        kernels=True)
            t = timing_from_native(res)
            if res.kernels_read:
                self._kernels[(algo, math_type)] = distinct(res.kernels)
        else:
            native.run_algorithm(self.direction, self.native, algo, math_type)
        c = None
        if check and self.ref is not None:
            try:
                c = check_output(self.problem, out, self.ref, math_type)
            except RuntimeError as e:
                if not native.is_out_of_memory(e):
                    raise
                raise native.out_of_memory("checking the output", 2 * out.numel() * 8,
                                           out.device.index or 0) from None
        return t, c

    def kernels(self, algo: int, math_type: str):
        """The kernels one launch runs: as its timing's graph named them, else read now."""
        if (algo, math_type) in self._kernels:
            return self._kernels[(algo, math_type)]
        return kernel_names(lambda: native.run_algorithm(self.direction, self.native, algo,
                                                         math_type))

    def close(self) -> None:
        self.tensors = self.native = self.ref = None


class LegacyRows(NamedTuple):
    """Everything the legacy API said about one direction, as records."""

    math_type: str
    find: List[AlgoResult]
    heuristics: List[AlgoResult]
    workspace: List[WorkspaceEntry]
    workspace_needed_bytes: int
    workspace_given_bytes: int
    find_requested: int
    find_returned: int
    find_wall_ms: float
    searched_math_types: List[str]
    find_wall_ms_all: float
    workspace_free_bytes: Optional[int]
    find_errors: List[str]

    @property
    def ok(self) -> List[AlgoResult]:
        return [r for r in self.find if r.ok]


def measure_legacy(problem: ConvProblem, direction: str, lab, options: ExploreOptions,
                   gpu_name: str, want_kernels: bool,
                   say: Callable[[str], None] = lambda m: None) -> LegacyRows:
    """Find, then every successful row re-timed (options.timing) and checked
    (options.check), with its kernels when ``want_kernels`` (to match PyTorch's picks and
    engine configs to it)."""
    say(f"{direction}: cudnnFind")
    rep = lab.find(options.max_workspace_bytes)
    workspace = [WorkspaceEntry(w.algo, w.algo_name, w.math_type, w.status,
                                None if w.bytes < 0 else int(w.bytes)) for w in rep.workspace]
    asks = {(w.algo, w.math_type): w.bytes for w in workspace}
    found = unique_rows(rep.find)
    free = None if rep.workspace_free < 0 else int(rep.workspace_free)
    n_ok = sum(1 for r in found if r.status_code == 0)
    rows, i = [], 0
    for r in found:
        ok = r.status_code == 0
        timing: Optional[Timing] = None
        check: Optional[Check] = None
        kernels = None
        note = ""
        peak = analysis.peak_for(gpu_name, problem.dtype, r.math_type) if ok else None
        if ok:
            i += 1
            if options.retime or options.check:
                say(f"{direction}: {'re-timing' if options.retime else 'checking'} {i}/{n_ok} "
                    f"{r.algo_name} ({r.math_type})")
                try:
                    timing, check = lab.measure(r.algo, r.math_type,
                                                options.timing if options.retime else None,
                                                options.check)
                except ResourceError as e:  # this row only: the others may still fit
                    note = str(e)
            if want_kernels and not note:
                kernels = list(lab.kernels(r.algo, r.math_type))
        else:
            need = max(asks.get((r.algo, r.math_type)) or 0, int(r.memory_bytes) or 0)
            note = find_row_note(need, int(rep.workspace_given),
                                 options.max_workspace_bytes is not None, free)
        rows.append(AlgoResult(
            algo=r.algo, algo_name=r.algo_name, math_type=r.math_type, status=r.status,
            status_code=r.status_code,
            time_ms=float(r.time_ms) if r.time_ms >= 0 and ok else None,
            workspace_bytes=int(r.memory_bytes), deterministic=bool(r.deterministic),
            note=note, timing=timing,
            max_error=check.max_error if check else None,
            tolerance=check.tolerance if check else None,
            output_finite=check.output_finite if check else None,
            peak_tflops=peak.tflops if peak else None, peak_unit=peak.unit if peak else "",
            kernels=kernels, found_under=r.found_under,
            pytorch_candidate=r.found_under == rep.math_type))
    heuristics = [AlgoResult(algo=h.algo, algo_name=h.algo_name, math_type=h.math_type,
                             status=h.status, status_code=h.status_code, time_ms=None,
                             workspace_bytes=int(h.memory_bytes),
                             deterministic=bool(h.deterministic))
                  for h in rep.heuristics]  # cudnnGet*_v7 times nothing
    return LegacyRows(rep.math_type, rows, heuristics, workspace, int(rep.workspace_needed),
                      int(rep.workspace_given), int(rep.requested), int(rep.returned),
                      float(rep.find_wall_ms), list(rep.searched), float(rep.find_wall_ms_all),
                      free, list(rep.find_errors))


def unique_rows(found):
    """Find's rows, one per (algorithm, math type): Find under one math type also returns
    rows of others, so the calls overlap. The first call's row is kept (PyTorch's math
    type comes first, so its rows are exactly the ones PyTorch's legacy path sees), in
    the calls' order."""
    seen, out = set(), []
    for r in found:
        if (r.algo, r.math_type) not in seen:
            seen.add((r.algo, r.math_type))
            out.append(r)
    return out
