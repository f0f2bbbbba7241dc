"""The package's shape: imports point one way, and no layer does another's
work."""

import ast
import pathlib

import keras_gen

ROOT = pathlib.Path(keras_gen.__file__).parent


def _module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def import_graph():
    """`{module: {modules it imports}}` over keras_gen, counting imports
    inside functions too (a lazy import is still a dependency)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components of more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle():
    assert cycles(import_graph()) == []


def test_serving_holds_no_sampling_arithmetic():
    # Scheduling only: the engine's step is the samplers' and processors'.
    graph = import_graph()
    for name, edges in graph.items():
        if name.startswith("keras_gen.serving"):
            assert not {
                e for e in edges if e.startswith("keras_gen.kernels.filters")
            }, name
    source = "".join(p.read_text() for p in (ROOT / "serving").glob("*.py"))
    for word in ("log_softmax", "top_k_filter", "sample_from_logits", "count_tokens"):
        assert word not in source, word
