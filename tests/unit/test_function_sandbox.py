"""Each function imports from its own package only, as each has a sandbox of its own on Lambda.

On Lambda a function's Python finds its modules in /var/task (its deployment package),
/opt/python (its Layers) and the runtime's own directories, nothing else ("Layer paths
for each Lambda runtime", packaging-layers.html; LAMBDA_TASK_ROOT,
configuration-envvars.html): a module that only another function's CodeUri holds is
not there, and the Python runtime answers the handler's import with
Runtime.ImportModuleError "Unable to import module '<handler module>': No module named
'<module>'" (awslambdaric's bootstrap.py, _get_handler), a handler's own import when
called with the ModuleNotFoundError it raised.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.local import lambdas
from onceflow.local.patches import registry

ARN = "arn:aws:lambda:us-east-1:123456789012:function:"


def _function(root: Path, name: str, source: str, **files: str) -> lambdas.FunctionSpec:
    """A function whose CodeUri is root/name, its handler module sandbox_<name>."""
    code = root / name
    code.mkdir(parents=True, exist_ok=True)
    (code / f"sandbox_{name}.py").write_text(source)
    for path, text in files.items():
        (code / path).parent.mkdir(parents=True, exist_ok=True)
        (code / path).write_text(text)
    return lambdas.FunctionSpec(
        name, name, ARN + name, code, f"sandbox_{name}.handler", 3.0, 128, {}
    )


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[lambdas.InProcessRuntime]:
    """A runtime as an engine runs it (its output, its imports' finder and checks in
    place), its modules forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there
    before = set(sys.modules)
    lambdas.FUNCTION_OUTPUT.install()
    sandbox = registry.install_all(lambdas.PATCHES)
    try:
        yield lambdas.InProcessRuntime()
    finally:
        assert sandbox.installer.undo() == []
        lambdas.FUNCTION_OUTPUT.uninstall()
        for name in set(sys.modules) - before:
            if name.startswith("sandbox_"):
                del sys.modules[name]


OWNER = "import sandbox_shared_helper\n\ndef handler(event, context):\n    return 'owner'\n"
HELPER = {"sandbox_shared_helper.py": "VALUE = 'only in the owner'\n"}


@pytest.mark.parametrize("owner_first", [True, False], ids=["imported-first", "not-yet"])
def test_a_module_only_another_functions_package_holds_fails_to_import_as_on_lambda(
    tmp_path: Path, runtime: lambdas.InProcessRuntime, owner_first: bool
) -> None:
    # GIVEN two functions: the owner's package holds a helper module, the other's imports
    # it at load (a module-level import), which on Lambda its own package lacks
    owner = _function(tmp_path, "owner", OWNER, **HELPER)
    other = _function(
        tmp_path, "other", "import sandbox_shared_helper\n\ndef handler(e, c):\n    return 1\n"
    )
    for spec in (owner, other):
        runtime.register(spec)
    runtime.cold_start()
    # WHEN both are invoked (the owner first, its helper then in the process; or not)
    order = (owner, other) if owner_first else (other, owner)
    answers = {spec.name: runtime.invoke(spec.name, {}) for spec in order}
    # THEN the owner runs, and the other fails to load as Lambda's runtime answers it
    assert answers["owner"] == ("owner", None)
    payload, error = answers["other"]
    assert error == "Runtime.ImportModuleError", payload
    assert payload["errorMessage"] == (
        "Unable to import module 'sandbox_other': No module named 'sandbox_shared_helper'"
    )


def test_a_module_of_another_function_imported_when_called_raises_as_on_lambda(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN the owner's helper imported (the owner ran), and another function that
    # imports it only when it is called
    owner = _function(tmp_path, "owner", OWNER, **HELPER)
    lazy = _function(
        tmp_path,
        "lazy",
        "import json\n\ndef handler(event, context):\n"
        "    import sandbox_shared_helper\n    return sandbox_shared_helper.VALUE\n",
    )
    for spec in (owner, lazy):
        runtime.register(spec)
    runtime.cold_start()
    assert runtime.invoke("owner", {}) == ("owner", None)
    # WHEN the other is invoked
    payload, error = runtime.invoke("lazy", {})
    # THEN its import fails as in its own sandbox: the handler's ModuleNotFoundError
    assert error == "ModuleNotFoundError", payload
    assert payload["errorMessage"] == "No module named 'sandbox_shared_helper'"
    assert runtime.missing["lazy"] == "sandbox_shared_helper"


def test_a_layer_only_another_function_has_is_not_on_a_functions_path(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN a Layer (its python/) one function has and another has not
    layer = tmp_path / "layer" / "python"
    layer.mkdir(parents=True)
    (layer / "sandbox_layer_lib.py").write_text("NAME = 'from the layer'\n")
    source = (
        "def handler(event, context):\n"
        "    import sandbox_layer_lib\n    return sandbox_layer_lib.NAME\n"
    )
    with_layer, without = (
        _function(tmp_path, "with", source),
        _function(tmp_path, "without", source),
    )
    with_layer.layers = ("arn:aws:lambda:us-east-1:123456789012:layer:words:1",)
    runtime.layers = {with_layer.layers[0]: layer}
    for spec in (with_layer, without):
        runtime.register(spec)
    runtime.cold_start()
    # WHEN each imports the Layer's module
    # THEN the function with the Layer finds it (/opt/python), the other does not
    assert runtime.invoke("with", {}) == ("from the layer", None)
    payload, error = runtime.invoke("without", {})
    assert error == "ModuleNotFoundError"
    assert payload["errorMessage"] == "No module named 'sandbox_layer_lib'"


def test_a_function_still_imports_its_own_modules_and_the_engines_libraries(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN a function importing its own package's module, the standard library and a
    # library the engine runs on (boto3: in Lambda's Python runtime too)
    source = (
        "import json\nimport boto3\nfrom sandbox_pkg.inner import WHO\n\n"
        "def handler(event, context):\n    import sandbox_pkg.late\n"
        "    return [WHO, sandbox_pkg.late.WHEN, json.dumps(1), boto3.__name__]\n"
    )
    spec = _function(
        tmp_path,
        "mine",
        source,
        **{
            "sandbox_pkg/__init__.py": "",
            "sandbox_pkg/inner.py": "WHO = 'mine'\n",
            "sandbox_pkg/late.py": "WHEN = 'when called'\n",
        },
    )
    runtime.register(spec)
    runtime.cold_start()
    # WHEN it is invoked THEN all of them are found
    assert runtime.invoke("mine", {}) == (["mine", "when called", "1", "boto3"], None)


def test_outside_a_function_the_engines_own_imports_are_untouched(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN a function loaded (its helper in the process)
    owner = _function(tmp_path, "owner", OWNER, **HELPER)
    runtime.register(owner)
    runtime.cold_start()
    assert runtime.invoke("owner", {}) == ("owner", None)
    # WHEN code that runs no function imports it (the engine, a test)
    import sandbox_shared_helper  # type: ignore[import-not-found]

    # THEN it is the module the owner imported
    assert sandbox_shared_helper.VALUE == "only in the owner"
    assert json.loads(json.dumps({"a": 1})) == {"a": 1}


def test_two_packages_holding_one_module_name_are_refused_rather_than_share_it(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN two functions whose packages each hold their own sandbox_common module, which
    # each function's sandbox on Lambda imports as its own
    source = "import sandbox_common\n\ndef handler(e, c):\n    return sandbox_common.WHOSE\n"
    specs = [
        _function(tmp_path, name, source, **{"sandbox_common.py": f"WHOSE = {name!r}\n"})
        for name in ("red", "blue")
    ]
    for spec in specs:
        runtime.register(spec)
    runtime.cold_start()
    # WHEN both are invoked
    answers = [runtime.invoke(spec.name, {}) for spec in specs]
    # THEN the engine, which imports every function in one Python where one name is one
    # module, never answers one with the other's: the first runs its own, the second
    # fails to load with a line naming both and what to do
    assert answers[0] == ("red", None)
    payload, error = answers[1]
    assert error == "Runtime.ImportModuleError", payload
    message = payload["errorMessage"]
    assert str((tmp_path / "red").resolve()) in message and "rename" in message


def test_a_library_this_python_has_that_another_function_vendors_is_still_found(
    tmp_path: Path, runtime: lambdas.InProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a library this Python has (its site-packages stands for Lambda's runtime), a
    # copy of which one function's package vendors and imported first
    site = tmp_path / "site"
    site.mkdir()
    (site / "sandbox_lib.py").write_text("WHERE = 'site-packages'\n")
    monkeypatch.syspath_prepend(str(site))
    source = "import sandbox_lib\n\ndef handler(e, c):\n    return 1\n"
    vendoring = _function(tmp_path, "vendoring", source, **{"sandbox_lib.py": "WHERE = 'v'\n"})
    other = _function(tmp_path, "plain", source)
    for spec in (vendoring, other):
        runtime.register(spec)
    runtime.cold_start()
    # WHEN both run, the vendoring one first
    # THEN the other still imports it (the engine, and code on its thread, may need it)
    assert [runtime.invoke(spec.name, {}) for spec in (vendoring, other)] == [(1, None)] * 2
    sys.modules.pop("sandbox_lib", None)


# A function whose own package holds sandbox_only_a, reaching it every way a handler can:
# the import statement, importlib, a thread of its own and a pool's worker.
ONLY_A = {"sandbox_only_a.py": "VALUE = 'only in a'\n", "sandbox_a_unused.py": ""}
A_SOURCE = """\
import importlib
import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor

import sandbox_only_a


def _in_a_thread():
    found = []
    work = lambda: found.append(importlib.import_module("sandbox_only_a"))
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=10)
    return found[0].VALUE


def handler(event, context):
    with ThreadPoolExecutor(max_workers=1) as pool:
        pooled = pool.submit(lambda: importlib.import_module("sandbox_only_a").VALUE).result(10)
    return [sandbox_only_a.VALUE, importlib.import_module("sandbox_only_a").VALUE,
            importlib.__import__("sandbox_only_a").VALUE,
            importlib.util.find_spec("sandbox_only_a").name, _in_a_thread(), pooled]
"""
# Another function's ways of reaching it, each a handler body; a thread's exception is
# handed to the handler as its caller sees it (a pool's future raises it again; a thread
# of its own, which Python only prints, passed on by hand).
B_REACHES = {
    "import_module": "return importlib.import_module('sandbox_only_a').VALUE",
    "importlib.__import__": "return importlib.__import__('sandbox_only_a').VALUE",
    "importlib.reload": "return importlib.reload(sys.modules['sandbox_only_a']).VALUE",
    "thread": (
        "failed = []\n"
        "    def work():\n"
        "        try:\n"
        "            import sandbox_only_a\n"
        "        except ImportError as exc:\n"
        "            failed.append(exc)\n"
        "    thread = threading.Thread(target=work)\n"
        "    thread.start()\n"
        "    thread.join(timeout=10)\n"
        "    if failed:\n"
        "        raise failed[0]\n"
        "    return 'imported on its thread'"
    ),
    "pool worker": (
        "def work():\n"
        "        import sandbox_only_a\n"
        "        return sandbox_only_a.VALUE\n"
        "    with ThreadPoolExecutor(max_workers=1) as pool:\n"
        "        return pool.submit(work).result(timeout=10)"
    ),
}
B_HEADER = (
    "import importlib\nimport importlib.util\nimport sys\nimport threading\n"
    "from concurrent.futures import ThreadPoolExecutor\n\n\ndef handler(event, context):\n    "
)


@pytest.mark.parametrize("how", list(B_REACHES))
def test_a_module_another_function_imported_is_not_reached_by_any_other_way_as_on_lambda(
    tmp_path: Path, runtime: lambdas.InProcessRuntime, how: str
) -> None:
    # GIVEN function a, whose package holds sandbox_only_a and which has imported it
    # (on its own thread, with importlib, on threads it starts), and function b, from a
    # CodeUri of its own, which on Lambda has its own sandbox without it: each execution
    # environment holds "the code of the particular function version" and its own Layers
    # (security-overview-aws-lambda, "Lambda isolation technologies"; packaging-layers.html,
    # "Layer paths for each Lambda runtime"; python-package.html, "Runtime dependencies")
    a = _function(tmp_path, "a", A_SOURCE, **ONLY_A)
    b = _function(tmp_path, "b", B_HEADER + B_REACHES[how] + "\n")
    for spec in (a, b):
        runtime.register(spec)
    runtime.cold_start()
    expected_a = (["only in a"] * 3 + ["sandbox_only_a"] + ["only in a"] * 2, None)
    assert runtime.invoke("a", {}) == expected_a
    # WHEN b reaches for it
    payload, error = runtime.invoke("b", {})
    # THEN b's invocation fails as in its own sandbox, with the error its handler meets
    assert error == "ModuleNotFoundError", payload
    assert payload["errorType"] == "ModuleNotFoundError"
    assert payload["errorMessage"] == "No module named 'sandbox_only_a'"
    # AND a still imports and runs it, on its own thread and on those it starts
    assert runtime.invoke("a", {}) == expected_a


def test_find_spec_of_a_module_another_function_imported_finds_nothing_as_on_lambda(
    tmp_path: Path, runtime: lambdas.InProcessRuntime
) -> None:
    # GIVEN function a has imported its own sandbox_only_a (not its sandbox_a_unused), and
    # function b asks whether it can import either (importlib.util.find_spec: None for a
    # top-level module not found)
    a = _function(tmp_path, "a", A_SOURCE, **ONLY_A)
    b = _function(
        tmp_path,
        "b",
        B_HEADER + "return [importlib.util.find_spec(name) is None for name in "
        "('sandbox_only_a', 'sandbox_a_unused', 'sandbox_nowhere', 'json')]\n",
    )
    for spec in (a, b):
        runtime.register(spec)
    runtime.cold_start()
    assert runtime.invoke("a", {})[1] is None
    # WHEN b asks
    # THEN nothing is found, as for a module no package has; the standard library is
    assert runtime.invoke("b", {}) == ([True, True, True, False], None)


def test_a_thread_the_engine_starts_inside_a_handlers_call_is_not_the_functions(
    tmp_path: Path, runtime: lambdas.InProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN engine code (as moto's is: it starts an execution's thread inside the handler's
    # StartExecution call) that imports on a thread it starts, and function b calling it
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "sandbox_engine_code.py").write_text(
        "import threading\n\ndef start_and_import():\n    found = []\n"
        "    work = lambda: found.append(__import__('sandbox_only_a').VALUE)\n"
        "    thread = threading.Thread(target=work)\n    thread.start()\n"
        "    thread.join(timeout=10)\n    return found\n"
    )
    monkeypatch.syspath_prepend(str(engine))
    monkeypatch.setattr(lambdas, "_ENGINE_CODE", [*lambdas._ENGINE_CODE, str(engine)])
    a = _function(tmp_path, "a", A_SOURCE, **ONLY_A)
    b = _function(
        tmp_path,
        "b",
        "import sandbox_engine_code\n\ndef handler(event, context):\n"
        "    return sandbox_engine_code.start_and_import()\n",
    )
    for spec in (a, b):
        runtime.register(spec)
    runtime.cold_start()
    assert runtime.invoke("a", {})[1] is None
    # WHEN b calls it
    # THEN that thread is the engine's (AWS's side of the call), not b's: it imports as
    # the engine does
    assert runtime.invoke("b", {}) == (["only in a"], None)
    sys.modules.pop("sandbox_engine_code", None)


def test_work_a_function_hands_to_a_pool_another_started_imports_as_that_function(
    tmp_path: Path, runtime: lambdas.InProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a library's shared pool whose worker was started before any function ran (on
    # Lambda each function's process has its own), and function a's sandbox_only_a imported
    library = tmp_path / "library"
    library.mkdir()
    (library / "sandbox_shared_pool.py").write_text(
        "from concurrent.futures import ThreadPoolExecutor\n\n"
        "POOL = ThreadPoolExecutor(max_workers=1)\nPOOL.submit(int).result(timeout=10)\n"
    )
    monkeypatch.syspath_prepend(str(library))
    import sandbox_shared_pool  # type: ignore[import-not-found]

    a = _function(tmp_path, "a", A_SOURCE, **ONLY_A)
    b = _function(
        tmp_path,
        "b",
        "import importlib\nimport sandbox_shared_pool\n\ndef handler(event, context):\n"
        "    work = lambda: importlib.import_module('sandbox_only_a').VALUE\n"
        "    return sandbox_shared_pool.POOL.submit(work).result(timeout=10)\n",
    )
    for spec in (a, b):
        runtime.register(spec)
    runtime.cold_start()
    try:
        assert runtime.invoke("a", {})[1] is None
        # WHEN b hands the pool work that imports it
        payload, error = runtime.invoke("b", {})
    finally:
        sandbox_shared_pool.POOL.shutdown()
        sys.modules.pop("sandbox_shared_pool", None)
    # THEN the work runs as b's code, in b's sandbox: the module is not there
    assert error == "ModuleNotFoundError", payload
    assert payload["errorMessage"] == "No module named 'sandbox_only_a'"
