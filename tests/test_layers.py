"""The package's layers: no import circle (imports inside functions included), and the
pure core never imports the GPU layers or torch."""
import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cudnn_explorer")


def _graph():
    mods = {}
    for d, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), os.path.dirname(PKG))[:-3]
                name = rel.replace(os.sep, ".")
                mods[name[:-9] if name.endswith(".__init__") else name] = os.path.join(d, f)

    def resolve(n):
        while n and n not in mods:
            n = n.rpartition(".")[0]
        return n or None

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        here = m if path.endswith("__init__.py") else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path).read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                mod = (f"{base}.{node.module}" if node.module else base) if node.level \
                    else node.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for t in targets:
                r = resolve(t) if t.startswith("cudnn_explorer") else None
                if r and r != m and not (mods[r].endswith("__init__.py")
                                         and m.startswith(r + ".")):
                    graph[m].add(r)
                if t.split(".")[0] == "torch":
                    graph[m].add("torch")
    return graph


def test_no_import_circle():
    graph = _graph()
    state, circles = {}, []

    def visit(m, stack):
        state[m] = 1
        for n in graph.get(m, ()):
            if state.get(n) == 1:
                circles.append(stack[stack.index(n):] + [n])
            elif n in graph and not state.get(n):
                visit(n, stack + [n])
        state[m] = 2

    for m in graph:
        if not state.get(m):
            visit(m, [m])
    assert not circles, circles


# Each layer and what it may import (besides the standard library and its own package):
# core, measure, model, pinning, store, jobs, report, cli; the package itself re-exports.
ALLOWED = {
    "core": {"core"},
    "measure": {"core", "measure", "torch"},
    "model": {"core", "measure", "model", "pinning", "torch"},
    "pinning": {"core", "measure", "pinning", "torch"},
    "store": {"core", "store"},
    "jobs": {"core", "measure", "model", "pinning", "store", "jobs", "torch"},
    "report": {"core", "report"},
    "cli": {"core", "jobs", "report", "cli", "model", "store", "torch"},
}


def _layer(name):
    if name == "torch":
        return "torch"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_is_in_a_layer_and_imports_only_what_its_layer_may():
    graph = _graph()
    for m, deps in graph.items():
        layer = _layer(m)
        if m in ("cudnn_explorer", "cudnn_explorer.__main__", "cudnn_explorer._C"):
            continue
        assert layer in ALLOWED, f"{m}: in no layer ({', '.join(ALLOWED)})"
        bad = {d for d in deps if _layer(d) not in ALLOWED[layer] | {""}}
        assert not bad, (m, bad)


def test_layers_import_only_the_layers_before_them():
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith("cudnn_explorer.core"):
            assert not any(d == "torch" or d.startswith(("cudnn_explorer.measure",
                                                          "cudnn_explorer.report",
                                                          "cudnn_explorer.model",
                                                          "cudnn_explorer.store",
                                                          "cudnn_explorer.jobs",
                                                          "cudnn_explorer.cli"))
                           for d in deps), (m, deps)
        if m.startswith("cudnn_explorer.jobs"):  # the jobs return records; none renders
            assert not any(d.startswith(("cudnn_explorer.report", "cudnn_explorer.cli"))
                           for d in deps), (m, deps)
        if m.startswith("cudnn_explorer.report"):
            assert not any(d == "torch" or d.startswith(("cudnn_explorer.measure",
                                                          "cudnn_explorer.model"))
                           for d in deps), (m, deps)
        if m.startswith(("cudnn_explorer.measure", "cudnn_explorer.model")):
            # measuring and models feed the report; they never render
            assert not any(d.startswith(("cudnn_explorer.report", "cudnn_explorer.cli"))
                           for d in deps), (m, deps)
        if m.startswith("cudnn_explorer.measure"):
            assert not any(d.startswith("cudnn_explorer.model") for d in deps), (m, deps)
        if m.startswith(("cudnn_explorer.measure", "cudnn_explorer.model")):
            assert not any(d.startswith("cudnn_explorer.store") for d in deps), (m, deps)
        if m.startswith("cudnn_explorer.store"):  # the store keeps records: core only
            assert not any(d == "torch" or d.startswith(("cudnn_explorer.measure",
                                                          "cudnn_explorer.model",
                                                          "cudnn_explorer.report"))
                           for d in deps), (m, deps)
