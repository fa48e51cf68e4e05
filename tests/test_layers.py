"""The package's imports only point down (config -> pure pieces -> components -> run -> loops ->
train() -> CLI): the layer contracts in pyproject.toml hold, and no module reaches itself again
through the modules it imports. Function-level (lazy) imports count like any other."""

from __future__ import annotations

import pathlib

import grimp
from importlinter.cli import lint_imports

PYPROJECT = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every direct import a -> b with a chain back from b to a, as the cycle [a, b, ..., a]."""
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycles.append([module, *back])
    return cycles


def test_the_layer_contracts_hold():
    # prints the broken contract (which module imports which, and where) on failure
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0


def test_no_module_imports_itself_back():
    cycles = import_cycles(grimp.build_graph("jaxrl_async", cache_dir=None))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_a_cycle_is_found():
    graph = grimp.ImportGraph()
    for importer, imported in [("p.run", "p.training"), ("p.training", "p.loops"), ("p.loops", "p.run"),
                               ("p.loops", "p.config")]:
        graph.add_import(importer=importer, imported=imported)
    cycles = import_cycles(graph)
    assert ["p.run", "p.training", "p.loops", "p.run"] in cycles and len(cycles) == 3
    assert not any("p.config" in cycle for cycle in cycles)
