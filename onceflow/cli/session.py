"""What a command runs with: the engine of the `onceflow up` it was sent to, or one of its
own; the template; and what every command reads and prints alike (events, parameters,
JSON values, the records it leaves).

The engine is passed in (Session.shared), never read from a module global; the engine
module, and moto with it, loads only when a command asks for an engine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from onceflow.local import INPUT_DEPTH_LIMIT, RECURSION_LIMIT
from onceflow.project import (
    TemplateNotFound,
    bundled_app,
    find_template,
    stack_label,
    template_or_bundled,
)
from onceflow.view import records
from onceflow.view.history import Execution

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine
    from onceflow.local.lambdas import FunctionSpec
    from onceflow.local.server import SharedEngine

# What a command run without `onceflow up` says, once, before it runs.
FRESH_STACK = (
    "local: this command runs on a fresh, empty local stack, gone when it ends; "
    "`onceflow up` (in another terminal) keeps one for the commands after it"
)


@dataclass(frozen=True)
class Session:
    """One command's run: ``shared``, the engine of the `onceflow up` that runs it (None: it
    runs alone); ``main``, the command line itself, which `onceflow up` serves."""

    shared: SharedEngine | None
    main: Callable[[list[str], SharedEngine], int]
    # The name of the fresh stack this command runs on when it runs alone.
    own_stack: str = field(default_factory=lambda: stack_label("own"))

    @property
    def stack(self) -> str:
        """The name the records of this command's executions give their stack."""
        return self.shared.stack if self.shared is not None else self.own_stack

    @contextlib.contextmanager
    def engine(self, args: argparse.Namespace) -> Iterator[LocalEngine]:
        """The engine a command runs on: the running `onceflow up` engine, or its own."""
        # Here, not at the top: a command on a deployed stack (--stack-name) never
        # reaches this line, and never imports moto (tests/unit/test_architecture.py).
        from onceflow.local.engine import LocalEngine
        from onceflow.local.server import engine_for

        parameters = parse_parameters(args.parameter_overrides)
        template = template_of(args)
        if args.verbose and self.shared is not None:
            print(
                "local: function logs stay with the running engine (onceflow up); "
                "use --no-server -v to see them",
                file=sys.stderr,
            )

        def fresh() -> LocalEngine:
            _fresh_stack_note(template)
            return LocalEngine(
                template,
                parameters,
                function_log=sys.stderr if args.verbose else io.StringIO(),
                function_log_level="DEBUG" if args.verbose else None,
            )

        with engine_for(self.shared, parameters, fresh, template) as engine:
            if self.shared is None:  # not again for every command sent to `onceflow up`
                _foreign_processor_note(engine)
            else:
                _reload_changed_code(engine)
            _unloadable_handler_note(engine)  # at every command until the code is fixed
            engine.runtime.missing.clear()
            yield engine
            _missing_module_note(engine)

    def record(self, engine: LocalEngine, known: Iterable[Execution] = ()) -> None:
        """Save the engine's finished executions for `onceflow executions` and `show`."""
        known = list(known)
        # On the shared engine, only what this command ran: not all it ever ran.
        since = self.shared.started if self.shared is not None else None
        saved = records.save_all(engine, known, since=since, stack=self.stack)
        if len(saved) == 1 and len(known) == 1:
            print(f"local: recorded; see it with `onceflow show {known[0].name}`", file=sys.stderr)
        elif saved:
            print(
                f"local: {len(saved)} execution(s) recorded; list them with `onceflow executions`",
                file=sys.stderr,
            )


def demo_template(parameters: dict[str, str]) -> Path | None:
    """The template the demo runs on when it is not the project's: onceflow's own app's, when
    the project's template is not onceflow's (an app that nests it around a function of
    its own takes none of the demo's parameters, and the demo's images and its verdict are
    for onceflow's image processor). None: the project's (onceflow's own, or a copy)."""
    from onceflow.local.template import load_template

    project = template_or_bundled()
    declared = load_template(project).get("Parameters") or {}
    if all(name in declared for name in parameters):
        return None
    return bundled_app() / "template.yaml"


def parse_parameters(pairs: list[str]) -> dict[str, str]:
    parameters = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--parameter-overrides takes NAME=VALUE, not {pair!r}")
        parameters[name] = value
    return parameters


def template_of(args: argparse.Namespace) -> Path:
    """The local stack's template: --template, else the nearest template.yaml upward."""
    if args.template is not None:
        given = Path(args.template)
        if not given.is_file():
            raise TemplateNotFound(f"--template {given}: no such file")
        return given.resolve()
    try:
        return find_template()
    except TemplateNotFound:
        print(
            "local: no template.yaml here or in a directory above: onceflow's own app runs "
            "(`onceflow init DIR` writes an app of yours that nests it)",
            file=sys.stderr,
        )
        return bundled_app() / "template.yaml"


def _fresh_stack_note(template: Path) -> None:
    if template.parent != Path.cwd().resolve():
        print(f"local: using {template}", file=sys.stderr)  # found above, or --template
    print(FRESH_STACK, file=sys.stderr)


def _reload_changed_code(engine: LocalEngine) -> None:
    """On `onceflow up`, functions whose files changed since they were loaded are loaded
    afresh, as a new deployment (a cold start: module-level state starts over), so that a
    command runs the code as it is now (sam local invoke reads it at each invocation)."""
    runtime = engine.runtime

    def changed(spec: FunctionSpec) -> bool:
        for path in runtime.import_paths(spec):
            for folder, dirs, files in os.walk(path):
                dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
                for name in files:
                    if _modified(os.path.join(folder, name)) > runtime.loaded_at:
                        return True
        return False

    if names := [spec.logical_id for spec in runtime.functions.values() if changed(spec)]:
        runtime.cold_start()
        for spec in list(runtime.functions.values()):
            runtime.load(spec)
        print(
            f"local: {', '.join(names)}: code changed since it was loaded; loaded afresh, "
            "as a new deployment (module-level state starts over)",
            file=sys.stderr,
        )


def _modified(path: str) -> float:
    """When a file listed in a code root last changed: a dangling link's own time (an
    editor's lock file, .#main.py), and now for a file gone since it was listed (renamed
    away mid-save: the code is changing)."""
    for status in (os.stat, os.lstat):  # the file; else the link itself, if it is one
        try:
            return status(path).st_mtime
        except FileNotFoundError:
            continue
    return datetime.datetime.now().timestamp()


def _unloadable_handler_note(engine: LocalEngine) -> None:
    """One line for each function whose handler could not be loaded: its invocations fail
    with the Python runtime's error (the execution shows it), as on Lambda."""
    for spec in list(engine.runtime.functions.values()):
        if spec.name in engine.runtime.load_errors:
            engine.runtime.load(spec)  # again: the code may be fixed since (onceflow up)
        error = engine.runtime.load_errors.get(spec.name)
        if error is not None:
            print(
                f"local: {spec.logical_id} (Handler {spec.handler}, CodeUri "
                f"{spec.code_uri}) cannot be loaded: {error}; each invocation fails with it, "
                f"as on Lambda, until the code is fixed{_dependency_hint(engine, spec, error)}"
                f"{_runtime_hint(spec, error)}",
                file=sys.stderr,
            )


def _runtime_hint(spec: FunctionSpec, error: str) -> str:
    """The engine imports every function in its own Python, whatever its Runtime: code
    this Python cannot compile or import may be fine on its runtime (docs/processor.md)."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if spec.runtime == f"python{here}" or not error.startswith(
        ("Runtime.UserCodeSyntaxError", "Runtime.ImportModuleError")
    ):
        return ""
    return (
        f"; its Runtime is {spec.runtime}, and the engine runs it in Python {here} "
        f"({sys.executable}): install onceflow in a Python {spec.runtime[6:]} to run it as "
        "Lambda does"
    )


def _dependency_hint(engine: LocalEngine, spec: FunctionSpec, error: str) -> str:
    """What to do when a library the function imports is missing: the engine runs handlers
    in its own Python (sam build packages CodeUri/requirements.txt for Lambda, not here;
    a Layer from outside the template is not fetched)."""
    missing = re.search(r"No module named '([^'.]+)", error)
    handler_module = spec.handler.rpartition(".")[0].replace("/", ".").split(".")[0]
    if missing is None or missing.group(1) == handler_module:
        return ""
    owners = [
        other.name
        for other in engine.runtime.functions.values()
        if other.name != spec.name
        and PathFinder.find_spec(missing.group(1), engine.runtime.import_paths(other))
    ]
    if owners:
        return (
            f"; '{missing.group(1)}' is in another function's package ({', '.join(owners[:3])}), "
            "and on Lambda each function has only its own CodeUri and Layers: put it in this "
            "function's CodeUri or in a Layer both use"
        )
    # the function's and its Layers' (sam build installs a Layer's with its BuildMethod)
    roots = [spec.code_uri, *engine.runtime.layer_paths(spec)]
    files = [root / "requirements.txt" for root in roots if (root / "requirements.txt").is_file()]
    what = " ".join(f"-r {path}" for path in files) or missing.group(1)
    layers = [arn for arn in spec.layers if arn not in engine.runtime.layers]
    from_layers = f" (or from its Layers {', '.join(layers)})" if layers else ""
    return (
        f"; a library its Lambda package carries (sam build){from_layers} must be in "
        f"onceflow's Python here, where the engine runs it: {sys.executable} -m pip install "
        f"{what}"
    )


def _missing_module_note(engine: LocalEngine) -> None:
    """One line for each function whose invocation raised ModuleNotFoundError in this
    command (a library imported in the handler, not at its import)."""
    for name, module in list(engine.runtime.missing.items()):
        spec = engine.runtime.functions[name]
        error = f"No module named '{module}'"
        print(
            f"local: {spec.logical_id} (Handler {spec.handler}) raised ModuleNotFoundError: "
            f"{error}{_dependency_hint(engine, spec, error)}"
            f"{_runtime_hint(spec, 'Runtime.ImportModuleError')}",  # a newer stdlib's?
            file=sys.stderr,
        )
        engine.runtime.missing.pop(name, None)


def _foreign_processor_note(engine: LocalEngine) -> None:
    """Say how a function of the user's runs locally when ProcessorFunctionArn names one the
    local stack lacks (the execution then fails as on AWS, with Lambda's ResourceNotFound)."""
    arn = engine.stack.parameters.get("ProcessorFunctionArn", "")
    if not arn:
        return
    try:
        engine.client("lambda").get_function(FunctionName=arn)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        print(
            f"local: ProcessorFunctionArn {arn} is no function of the local stack, so the "
            "processor's calls fail with ResourceNotFound. Locally your function runs when a "
            "parent template defines it and nests onceflow (examples/word-count; "
            "`onceflow init DIR` writes one)",
            file=sys.stderr,
        )


def _sample_path(path: str) -> Path:
    """The file an event path names: as given, or outside any project a sample of the app
    the package carries (the README's `-e events/...` works from any directory)."""
    given = Path(path)
    if given.exists() or given.is_absolute():
        return given
    try:
        find_template()
    except TemplateNotFound:
        sample = bundled_app() / given
        if sample.is_file():
            print(f"local: {path} is not here: using onceflow's sample {sample}", file=sys.stderr)
            return sample
    return given


def load_event(path: str) -> Any:
    """The event file's JSON, or a one-line refusal that names the file and what is wrong."""
    try:
        text = sys.stdin.read() if path == "-" else _sample_path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"onceflow: cannot read event file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # JSON exchanged between systems is UTF-8 (RFC 8259, 8.1)
        raise SystemExit(
            f"onceflow: {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, RECURSION_LIMIT))  # as deep as the engine reads
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"onceflow: {path} is not JSON: {exc}") from None
    except RecursionError:
        raise SystemExit(
            f"onceflow: {path} nests deeper than this tool reads (about {RECURSION_LIMIT:,} "
            f"levels); the local engine runs input at most {INPUT_DEPTH_LIMIT:,} levels deep"
        ) from None
    finally:
        sys.setrecursionlimit(before)


def json_value(value: Any) -> Any:
    """What JSON output makes of a value JSON has no type for: times in ISO 8601."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    raise TypeError(f"a {type(value).__name__} in the output has no JSON form")
