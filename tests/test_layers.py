"""The layering drawn in docs/architecture.md, checked against every import in src/, and the sizes
that keep each module readable in one sitting."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Module (or package) -> layer, as docs/architecture.md draws them.
LAYERS = {
    "roberta.errors": 0,
    "roberta.io": 0,
    "roberta.config": 0,
    "roberta.inputs": 0,
    "roberta.validation": 0,
    "roberta.options": 0,
    "roberta.model": 1,
    "roberta.padding": 1,
    "roberta.tokenizer": 1,
    "roberta.checkpoint": 2,
    "roberta.data": 2,
    "roberta.runtime": 2,
    "roberta.qa": 2,
    "roberta.similarity": 2,
    "roberta.tagging": 2,
    "roberta.convert": 3,
    "roberta.train": 4,
    "roberta.tasks": 5,
    "roberta.hub": 6,
    "roberta.demo": 6,
    "roberta.evaluation": 6,
    "roberta.serve": 6,
    "roberta.cli": 7,
}
# The old paths of moved modules, kept importable for users (each is its new module under its old
# name), in the layer of the module it now is.
SHIMS = {
    "roberta.text_input": "roberta.inputs.text",
    "roberta.arrow_input": "roberta.inputs.arrow",
    "roberta.precision": "roberta.runtime.precision",
    "roberta.int8": "roberta.runtime.int8",
    "roberta.batching": "roberta.runtime.batching",
    "roberta.onnx_model": "roberta.runtime.onnx_model",
    "roberta.onnx_export": "roberta.convert.onnx",
    "roberta.infer": "roberta.hub.files",
    "roberta.sts": "roberta.evaluation.sts",
    "roberta.probe": "roberta.evaluation.probe",
    "roberta.wordpiece": "roberta.tokenizer.training",
    "roberta.tasks.squad_data": "roberta.qa",
    "roberta.tasks.rows": "roberta.inputs.rows",
}


def layer_of(module: str) -> int | None:
    for old, new in SHIMS.items():
        if module == old or module.startswith(old + "."):
            module = new + module[len(old) :]
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None  # the package root `roberta` (lazy re-exports)


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("roberta")}


def test_every_import_points_down_or_sideways():
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        own = layer_of(module)
        if own is None:
            continue
        for target in imports(path):
            theirs = layer_of(target)
            if theirs is not None and theirs > own:
                upward.append(f"{module} (layer {own}) imports {target} (layer {theirs})")
    assert not upward, "\n".join(upward)


def test_every_module_has_a_layer():
    modules = {".".join(p.relative_to(SRC).with_suffix("").parts) for p in SRC.rglob("*.py")}
    unplaced = {
        m for m in modules if m not in ("roberta.__init__",) and layer_of(m.removesuffix(".__init__")) is None
    }
    assert not unplaced


# A file, function or class longer than these is split along its seams (issue #35).
MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_CLASS_LINES = 550, 60, 300
# What is over a limit today, by name (path, or path:name), with the reason; none at present.
OVERSIZE: dict[str, str] = {}


def oversize(path: Path) -> list[tuple[str, int, int]]:
    """(name, lines, limit) of `path` itself, and of each function and class in it, over its limit."""
    text = path.read_text()
    name = path.relative_to(SRC).as_posix()
    found = [(name, len(text.splitlines()), MAX_FILE_LINES)]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            found.append((f"{name}:{node.name}", node.end_lineno - node.lineno + 1, limit))
    return [(n, lines, limit) for n, lines, limit in found if lines > limit]


def test_no_file_function_or_class_is_over_its_size():
    over = [item for path in sorted(SRC.rglob("*.py")) for item in oversize(path)]
    unexpected = [
        f"{name}: {lines} lines (at most {limit})" for name, lines, limit in over if name not in OVERSIZE
    ]
    assert not unexpected, "\n".join(unexpected)
    fixed = set(OVERSIZE) - {name for name, _, _ in over}
    assert not fixed, f"within the limits now, remove from OVERSIZE: {sorted(fixed)}"


# Files that import an old path on purpose: the tests that the old paths still work.
OLD_PATH_TESTS = {"tests/tokenizer/test_wordpiece.py", "tests/test_layers.py"}


def test_the_project_imports_each_name_from_where_it_lives():
    """Only users go through the old paths: src/, tests/ and benchmarks/ import the new ones."""
    root = SRC.parent
    shims = {root / "src" / (old.replace(".", "/") + ".py") for old in SHIMS}
    found = []
    for folder in ("src", "tests", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            if (
                path in shims
                or path.relative_to(root).as_posix() in OLD_PATH_TESTS
                or "node_modules" in path.parts
            ):
                continue
            old = {t for t in imports(path) if any(t == o or t.startswith(o + ".") for o in SHIMS)}
            found += [f"{path.relative_to(root)} imports {name}" for name in sorted(old)]
    assert not found, "\n".join(found)


def test_each_old_path_is_its_new_module():
    import importlib

    for old, new in SHIMS.items():
        if old not in ("roberta.wordpiece", "roberta.tasks.squad_data"):  # re-exports of a few names
            assert importlib.import_module(old) is importlib.import_module(new), old
