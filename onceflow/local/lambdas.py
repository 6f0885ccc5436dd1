"""Run a template's Lambda handlers in-process, the way the Lambda runtime would."""

from __future__ import annotations

import builtins
import decimal
import functools
import importlib
import importlib.util
import io
import json
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import TYPE_CHECKING, Any, TextIO

from onceflow.local.errors import EngineError

if TYPE_CHECKING:
    from onceflow.local.patches.registry import Installer

_IMPORT_LOCK = threading.Lock()

# Powertools' Logger formatter keys and Metrics set are module-level state that concurrent
# invocations share here (a sandbox runs one at a time): a dict changed while another
# iterated it dropped log lines and failed finished invocations. A lock each makes every
# step whole (docs/operate.md, "Logs").
_FORMATTER_LOCK = threading.RLock()
_METRICS_LOCK = threading.RLock()
_FORMATTER_STEPS = ("format", "append_keys", "remove_keys", "clear_state")
_METRICS_STEPS = (
    "add_metric", "add_dimension", "add_dimensions", "add_metadata", "set_timestamp",
    "set_default_dimensions", "add_cold_start_metric", "serialize_metric_set",
    "flush_metrics", "clear_metrics",
)  # fmt: skip


def _guard(cls: type, names: tuple[str, ...], lock: Any) -> list[str]:
    guarded = []
    for name in names:
        original = getattr(cls, name)
        if getattr(original, "onceflow_guarded", False):
            continue

        def step(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return _original(self, *args, **kwargs)

        functools.update_wrapper(step, original)
        step.onceflow_guarded = True  # type: ignore[attr-defined]
        setattr(cls, name, step)
        guarded.append(f"{cls.__name__}.{name}")
    return guarded


def guard_powertools() -> list[str]:
    """Serialise the shared Powertools steps (once); returns those guarded now."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

    return _guard(LambdaPowertoolsFormatter, _FORMATTER_STEPS, _FORMATTER_LOCK) + _guard(
        AmazonCloudWatchEMFProvider, _METRICS_STEPS, _METRICS_LOCK
    )


# On a thread running a function's code (its import, its invocations): its variables and
# its import paths.
_FUNCTION = threading.local()


class _FunctionEnviron(os._Environ[str]):
    """os.environ while an engine runs: on a thread running a function's code (its import,
    its invocations) the function's own variables come first, as each function has its
    own environment on Lambda, and its writes and deletions stay its own (None marks a
    deleted one), never the process's nor another function's; any other thread (one a
    handler starts too) sees the process's. A subprocess sees the process's (os.putenv's)
    environment."""

    @staticmethod
    def _own() -> dict[str, str | None] | None:
        own: dict[str, str | None] | None = getattr(_FUNCTION, "variables", None)
        return own

    def __getitem__(self, key: str) -> str:
        own = self._own()
        if own is None or key not in own:
            return super().__getitem__(key)
        value = own[key]
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        own = self._own()
        if own is None:
            super().__setitem__(key, value)
            return
        self.encodekey(key), self.encodevalue(value)  # the TypeError os.environ raises
        own[key] = value

    def __delitem__(self, key: str) -> None:
        own = self._own()
        if own is None:
            super().__delitem__(key)
            return
        if key not in self:
            raise KeyError(key)
        own[key] = None

    def __iter__(self) -> Iterator[str]:
        own = self._own() or {}
        yield from (key for key, value in list(own.items()) if value is not None)
        yield from (key for key in super().__iter__() if key not in own)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@contextmanager
def function_environment(
    variables: Mapping[str, str | None], paths: list[str]
) -> Iterator[dict[str, str | None]]:
    """On this thread, os.environ shows these variables over the process's (None: deleted),
    and imports find the function's modules in these paths only (_OwnPackage). Yields
    them as the code leaves them (its writes stay its own: a copy)."""
    before = getattr(_FUNCTION, "variables", None), getattr(_FUNCTION, "paths", None)
    _FUNCTION.variables = own = dict(variables)
    _FUNCTION.paths = paths
    try:
        yield own
    finally:
        _FUNCTION.variables, _FUNCTION.paths = before


@functools.lru_cache(maxsize=4096)
def _home(origin: str) -> str:
    """The import path a top-level module of this origin (_origin) was found in."""
    path = Path(origin)
    return str(path.parent.parent if path.name.startswith("__init__.") else path.parent)


def _libraries() -> list[str]:
    """The import paths of this Python's own (not a function's)."""
    return [path for path in sys.path if path not in _CODE_ROOTS]


class _OwnPackage:
    """What a function's code imports, as in its own sandbox on Lambda, where its Python
    finds /var/task (its package), /opt/python (its Layers) and the runtime's libraries,
    never another function's package (packaging-layers.html, "Layer paths for each Lambda
    runtime"; each execution environment holds "the code of the particular function
    version" and its Layers: security-overview-aws-lambda, "Lambda isolation
    technologies"). On a thread running a function's code (and one it starts: PATCHES), a
    top-level module is found in its own import paths first, else anywhere but another
    function's (this Python's libraries stand for the runtime's); one that only another
    function's paths hold is not found, whether or not that function imported it already
    (sys.modules answers before any finder is asked, so every way in checks it: the import
    statement, importlib's import_module, __import__ and find_spec). Any other thread
    imports as Python does. The finder is in place while any engine runs (FUNCTION_OUTPUT),
    the checks while its patches are (PATCHES)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is None or path is not None:  # a submodule: found in its package's own path
            return None
        spec = PathFinder.find_spec(name, own) or PathFinder.find_spec(name, _libraries())
        if spec is None and PathFinder.find_spec(name, list(_CODE_ROOTS)):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return spec

    @staticmethod
    def check_loaded(name: str | None, own: list[str]) -> None:
        """Raise as its own sandbox would if the top-level module of name (absolute; None:
        left to the import to refuse) is loaded from another function's package only."""
        top = name.partition(".")[0] if name else ""
        origin = _origin(sys.modules.get(top)) if top else ""
        home = _home(origin) if origin else ""
        if home not in _CODE_ROOTS or home in own or PathFinder.find_spec(top, _libraries()):
            return  # (a library this Python has, another function vendors too: shared)
        if PathFinder.find_spec(top, own) is None:
            raise ModuleNotFoundError(f"No module named '{top}'", name=top)
        raise ImportError(
            f"its module '{top}' ({own[0]}) and another function's ({home}) have one name: on "
            "Lambda each function imports in its own sandbox, the local engine imports every "
            f"function in one Python, where one name is one module; rename '{top}' in one of "
            "them to run both here"
        )

    def install(self, on: bool) -> None:
        """The finder first on sys.meta_path, or taken away."""
        if on and self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        elif not on and self in sys.meta_path:
            sys.meta_path.remove(self)


OWN_PACKAGE = _OwnPackage()


def _absolute(name: str, package: str | None) -> str | None:
    """name as importlib resolves it (None: a relative name it refuses, as it will)."""
    if not name.startswith("."):
        return name
    try:
        return importlib.util.resolve_name(name, package)
    except (ImportError, ValueError):  # raised again by the import itself, as Python does
        return None


def _guarded_import(original: Callable[..., Any]) -> Callable[..., Any]:
    """builtins.__import__ (the import statement) or importlib.__import__, checking first."""

    def __import__(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is not None and not level:  # (a relative import: within its own package)
            OWN_PACKAGE.check_loaded(name, own)
        return original(name, globals, locals, fromlist, level)

    return functools.wraps(original)(__import__)


def _guarded_import_module(original: Callable[..., Any]) -> Callable[..., Any]:
    def import_module(name: str, package: str | None = None) -> Any:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is not None:
            OWN_PACKAGE.check_loaded(_absolute(name, package), own)
        return original(name, package)

    return functools.wraps(original)(import_module)


def _guarded_find_spec(original: Callable[..., Any]) -> Callable[..., Any]:
    def find_spec(name: str, package: str | None = None) -> Any:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is None:
            return original(name, package)
        absolute = _absolute(name, package)
        try:
            OWN_PACKAGE.check_loaded(absolute, own)
            return original(name, package)
        except ModuleNotFoundError as exc:
            if absolute is None or "." in absolute or exc.name != absolute:
                raise  # (a submodule whose package is missing: raised, as Python does)
            return None  # a top-level module its sandbox lacks: find_spec's "not found"

    return functools.wraps(original)(find_spec)


# The engine's code (onceflow.local's, moto's): a thread it starts inside a handler's AWS
# call (an execution, an asynchronous invoke) is AWS's side, not the function's.
_ENGINE_CODE: list[str] = []


def _started_by_function(frame: FrameType | None, own: list[str]) -> bool:
    """Whether the code starting a thread is the function's: the nearest frame in its own
    paths or in the engine's decides; libraries and the standard library between (a pool,
    s3transfer) start it for whoever called them."""
    while frame is not None:
        if _under(frame.f_code.co_filename, own):
            return True
        if _under(frame.f_code.co_filename, _ENGINE_CODE):
            return False
        frame = frame.f_back
    return False


def _as_function(own: list[str], work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """work, importing as the function of these paths does, on whatever thread runs it."""
    before = getattr(_FUNCTION, "paths", None)
    _FUNCTION.paths = own
    try:
        return work(*args, **kwargs)
    finally:
        _FUNCTION.paths = before


def _carrying_start(original: Callable[..., None]) -> Callable[..., None]:
    """Thread.start: a thread a function's code starts imports as that function's code,
    as it would in the function's one process on Lambda."""

    def start(self: threading.Thread) -> None:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is not None and _started_by_function(sys._getframe(1), own):
            self.run = functools.partial(_as_function, own, self.run)  # type: ignore[method-assign]
        original(self)

    return functools.wraps(original)(start)


def _carrying_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    """ThreadPoolExecutor.submit: work a function's code hands a pool runs as that
    function's code, whoever started the pool's worker (a library's shared pool)."""

    def submit(
        self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        own: list[str] | None = getattr(_FUNCTION, "paths", None)
        if own is not None and _started_by_function(sys._getframe(1), own):
            fn = functools.partial(_as_function, own, fn)
        return original(self, fn, *args, **kwargs)

    return functools.wraps(original)(submit)


_GUARDS = (
    (builtins, "__import__", _guarded_import),
    (importlib, "__import__", _guarded_import),
    (importlib, "import_module", _guarded_import_module),
    (importlib.util, "find_spec", _guarded_find_spec),
    (threading.Thread, "start", _carrying_start),
    (ThreadPoolExecutor, "submit", _carrying_submit),
)


def _install_sandbox(installer: Installer) -> None:
    import moto

    _ENGINE_CODE[:] = [str(Path(__file__).parent), str(Path(moto.__file__).parent)]
    for owner, name, guard in _GUARDS:
        installer.replace(owner, name, guard(getattr(owner, name)))


def _sandbox_fits() -> list[str]:
    from onceflow.local.patches.registry import gone, takes

    return [
        *(moved for owner, name, _ in _GUARDS for moved in gone(owner, name)),
        *takes(builtins.__import__, "name", "globals", "locals", "fromlist", "level"),
        *takes(importlib.__import__, "name", "globals", "locals", "fromlist", "level"),
        *takes(importlib.import_module, "name", "package"),
        *takes(importlib.util.find_spec, "name", "package"),
        *takes(threading.Thread.start, "self"),
        *takes(ThreadPoolExecutor.submit, "self", "fn"),
    ]


def __getattr__(name: str) -> Any:
    """PATCHES, made on first use: the registry imports moto, which this module need not."""
    if name != "PATCHES":
        raise AttributeError(name)
    from onceflow.local.patches.registry import Patch

    globals()["PATCHES"] = (
        Patch(
            name="function sandbox",
            kind="hook",
            why="Each function imports from its own package, as in its own sandbox on "
            "Lambda (packaging-layers.html): the import statement, importlib's "
            "import_module, __import__ and find_spec refuse a module only another "
            "function's package holds even once that function imported it, and a thread "
            "a function's code starts, or work it hands a pool, imports as that function.",
            test="tests/unit/test_function_sandbox.py::"
            "test_a_module_another_function_imported_is_not_reached_by_any_other_way_as_on_lambda",
            install=_install_sandbox,
            fits=_sandbox_fits,
        ),
    )
    return globals()["PATCHES"]


class FunctionOutput(io.TextIOBase):
    """Stands in for sys.stdout: in Lambda a function's stdout is its log stream, never the
    caller's terminal. Powertools Logger keeps the stream it saw at import and Metrics
    prints EMF, so routing is by thread: a thread running a handler writes to its engine's
    function log; everything else passes through. In place while any engine runs, with
    os.environ and imports routed by thread too (_FunctionEnviron, OWN_PACKAGE)."""

    def __init__(self) -> None:
        self.passthrough: TextIO = sys.__stdout__ or sys.stderr
        self._local = threading.local()
        self._engines = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        log: TextIO | None = getattr(self._local, "log", None)
        return (log or self.passthrough).write(text)

    def flush(self) -> None:
        self.passthrough.flush()

    def isatty(self) -> bool:
        return self.passthrough.isatty()

    @contextmanager
    def running_function(self, log: TextIO) -> Iterator[None]:
        self._local.log = log
        try:
            yield
        finally:
            self._local.log = None

    def install(self) -> None:
        with self._lock:
            self._engines += 1
            if sys.stdout is not self:
                self.passthrough = sys.stdout
                sys.stdout = self
            os.environ.__class__ = _FunctionEnviron
            OWN_PACKAGE.install(True)

    def uninstall(self) -> None:
        with self._lock:
            self._engines = max(self._engines - 1, 0)
            if not self._engines and sys.stdout is self:
                sys.stdout = self.passthrough
            if not self._engines:
                os.environ.__class__ = os._Environ
                OWN_PACKAGE.install(False)


FUNCTION_OUTPUT = FunctionOutput()


@dataclass
class LambdaContext:
    """The attributes and method of the context object Lambda passes to a handler, as
    awslambdaric's lambda_context.py makes them (memory_limit_in_mb is the text of
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE there, so a str)."""

    function_name: str
    invoked_function_arn: str
    memory: int
    timeout_seconds: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    client_context: Any = None
    identity: Any = field(  # an invocation that carries none
        default_factory=lambda: SimpleNamespace(
            cognito_identity_id=None, cognito_identity_pool_id=None
        )
    )
    _started: float = field(default_factory=time.monotonic)

    @property
    def memory_limit_in_mb(self) -> str:
        return str(self.memory)

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/[$LATEST]{self.aws_request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        elapsed = time.monotonic() - self._started
        return max(0, int((self.timeout_seconds - elapsed) * 1000))


# The variables Lambda sets itself: CreateFunction refuses a function that sets one
# (configuration-envvars.html, "Defined runtime environment variables", reserved: yes;
# TZ no longer is: cloudtools/troposphere#2260).
RESERVED_VARIABLES = frozenset({
    "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR",
})  # fmt: skip


@dataclass
class FunctionSpec:
    """What the template says about one function: enough to run it."""

    logical_id: str
    name: str
    arn: str
    code_uri: Path
    handler: str
    timeout: float
    memory: int
    environment: dict[str, str]
    runtime: str = "python3.13"
    layers: tuple[str, ...] = ()  # its Layers' ARNs, in order

    def variables(self) -> dict[str, str]:
        """The environment its code sees: the template's, then the variables Lambda sets
        and reserves (configuration-envvars.html, "Defined runtime environment variables";
        LAMBDA_TASK_ROOT is its CodeUri here, /var/task there)."""
        return {
            **self.environment,
            "AWS_LAMBDA_FUNCTION_NAME": self.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.name}",
            "LAMBDA_TASK_ROOT": str(self.code_uri.resolve()),
            "_HANDLER": self.handler,
        }


@dataclass(frozen=True)
class Invocation:
    """One finished invocation, as recorded for reports and tests."""

    function: str
    request_id: str
    error_type: str | None
    duration_ms: float


_ENGINE = Path(__file__).resolve().parent
# boto3 and what it needs come with the runtime; `sam build` puts the rest of a function's
# requirements.txt in its package (functions/requirements.txt).
_RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")


def _in_sandbox(filename: str, code_root: Path, layers: Iterable[Path] = ()) -> str:
    """Where the Lambda sandbox keeps filename (docs/local-engine.md, "A Lambda error's
    stackTrace": not verified in AWS's docs; a Layer's python/ is /opt/python,
    packaging-layers.html); anything else as it is."""
    path, paths = Path(filename).resolve(), sysconfig.get_paths()
    for layer in (layer for layer in layers if path.is_relative_to(layer)):
        return f"/opt/python/{path.relative_to(layer)}"
    lang = f"/var/lang/lib/python{sys.version_info.major}.{sys.version_info.minor}"
    for root in (code_root, paths["purelib"], paths["platlib"], paths["stdlib"]):
        if path.is_relative_to(root):
            part = path.relative_to(root)
            if root == paths["stdlib"]:
                return f"{lang}/{part}"
            runtime = root != code_root and part.parts[0] in _RUNTIME_PACKAGES
            return f"{lang}/site-packages/{part}" if runtime else f"/var/task/{part}"
    return filename


def error_payload(
    exc: BaseException, context: LambdaContext, code_uri: Path, layers: Iterable[Path] = ()
) -> dict[str, Any]:
    """What the Python runtime answers for a handler that raised (awslambdaric's
    bootstrap.py): the frames from the handler's on (the engine's own left out, as the
    runtime leaves out bootstrap.py's), each named where the sandbox keeps its file and
    formatted from (file, line, name, text), so without 3.11's ^^^ marks."""
    frames = traceback.extract_tb(exc.__traceback__)
    while frames and Path(frames[0].filename).resolve().is_relative_to(_ENGINE):
        frames.pop(0)
    root = code_uri.resolve()
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": context.aws_request_id,
        "stackTrace": traceback.format_list(
            [(_in_sandbox(f.filename, root, layers), f.lineno or 0, f.name, f.line) for f in frames]
        ),
    }


def _runtime_json(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):  # as its number: simplejson writes str(value) raw
        if not value.is_finite():
            # simplejson writes NaN or Infinity, which is no JSON: what Step Functions makes
            # of it is not verified, so the run fails here (harsher, never kinder)
            raise ValueError(f"Decimal {value} is not a JSON number")
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def marshal(payload: Any) -> str:
    """A handler's result as the Python runtime answers it (awslambdaric's
    lambda_runtime_marshaller.py, simplejson): a Decimal as its number, anything else
    JSON has no type for refused (TypeError), which the runtime answers with
    Runtime.MarshalError. A Decimal of more than 17 digits after the point is rounded to
    a double here (the runtime writes its digits; Step Functions reads a double)."""
    return json.dumps(payload, default=_runtime_json)


class RuntimeFault(Exception):
    """An error the Lambda runtime raises itself (its class's name is the error's type,
    Runtime.ImportModuleError ...), not the handler."""


def _fault(error_type: str, message: str) -> RuntimeFault:
    fault: RuntimeFault = type(error_type, (RuntimeFault,), {})(message)
    return fault


def _import_handler(handler: str, retry: bool) -> Callable[[Any, Any], Any]:
    """The handler ``module.function`` names, or the error the Python runtime answers it
    with: awslambdaric's bootstrap.py, _get_handler (aws-lambda-python-runtime-interface-
    client), its error types and messages. Any other error raised while the module runs
    (a KeyError on a missing variable) is answered as itself, as its init error is."""
    if retry:  # a module written since the last try: the import system's caches forget
        importlib.invalidate_caches()
    module_name, dot, attribute = handler.rpartition(".")
    if not dot:
        raise _fault(
            "Runtime.MalformedHandlerName",
            f"Bad handler '{handler}': not enough values to unpack (expected 2, got 1)",
        )
    if module_name.split(".")[0] in sys.builtin_module_names:
        raise _fault(
            "Runtime.BuiltInModuleConflict",
            f"Cannot use built-in module {module_name} as a handler module",
        )
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise _fault(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}"
        ) from None
    except SyntaxError as exc:
        raise _fault(
            "Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}"
        ) from None
    try:
        found: Callable[[Any, Any], Any] = getattr(module, attribute)
    except AttributeError:
        raise _fault(
            "Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'"
        ) from None
    return found


def _raising(error: Exception) -> Callable[[Any, Any], Any]:
    """A handler that answers with ``error``: the failed init's, for this invocation."""

    def handler(event: Any, context: Any) -> Any:
        raise error

    return handler


# Every code root (and Layer path) a function was loaded from in this process (any
# engine's, any app's).
_CODE_ROOTS: set[str] = set()
_LIBRARIES = tuple(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib"))


def _origin(module: Any) -> str:
    """Where a module was loaded from: its file, or a namespace package's first directory
    ("" for none)."""
    path = getattr(module, "__path__", None)
    return str(getattr(module, "__file__", None) or (next(iter(path), "") if path else ""))


def _under(origin: str, roots: Iterable[str]) -> bool:
    return any(origin.startswith(root.rstrip("/") + "/") for root in roots)


def _forget_function_modules(names: set[str]) -> None:
    """Forget every module imported from a function's code root, this engine's or an
    earlier one's (another app's functions/service would answer for this one's), and any
    other of the names this engine's handlers import (found first on another path), and
    nothing else: the engine's own libraries stay, even where a function vendors a copy.
    Called under _IMPORT_LOCK."""
    origins = {name: _origin(module) for name, module in list(sys.modules.items())}
    for name, origin in origins.items():  # (a namespace package reads its parent's path)
        named = name.split(".")[0] in names and origin and not _under(origin, _LIBRARIES)
        if named or _under(origin, _CODE_ROOTS):
            del sys.modules[name]


def _top_module(spec: FunctionSpec) -> str:
    return spec.handler.rpartition(".")[0].replace("/", ".").split(".")[0]


class InProcessRuntime:
    """Loads handlers from CodeUri + Handler and invokes them with a Lambda context."""

    def __init__(self) -> None:
        self.functions: dict[str, FunctionSpec] = {}
        self.invocations: list[Invocation] = []
        self._handlers: dict[str, Callable[[Any, Any], Any]] = {}
        # Each loaded function's os.environ as its init left it.
        self._environments: dict[str, dict[str, str | None]] = {}
        # A function whose handler could not be loaded at its last try: "ErrorType: message".
        self.load_errors: dict[str, str] = {}
        self._lock = threading.Lock()
        # Tests replace a handler (a processor that raises, sleeps ...) by name.
        self.overrides: dict[str, Callable[[Any, Any], Any]] = {}
        # Entered around every handler call, on the thread that runs it.
        self.around: Callable[[], AbstractContextManager[None]] = nullcontext
        self.function_log: TextIO = sys.stderr  # where its handlers' output goes
        # The template's Layers: ARN -> the directory that stands for its /opt/python.
        self.layers: dict[str, Path] = {}
        # A function whose invocation imported a module not here: the module's name.
        self.missing: dict[str, str] = {}
        self.loaded_at = 0.0  # the last cold start (time.time()): code newer is not loaded

    def register(self, spec: FunctionSpec) -> None:
        self.functions[spec.name] = spec

    def layer_paths(self, spec: FunctionSpec) -> list[Path]:
        """Its Layers of the template, each the directory that stands for /opt/python."""
        return [self.layers[arn] for arn in spec.layers if arn in self.layers]

    def import_paths(self, spec: FunctionSpec) -> list[str]:
        """Where Lambda's Python runtime finds its modules: the code root (/var/task) first,
        then each Layer's python/lib/<runtime>/site-packages and python/ ("Layer paths for
        each Lambda runtime", packaging-layers.html; their order after the root is not
        verified). A Layer from outside the template is not here (docs/processor.md)."""
        paths = [str(spec.code_uri.resolve())]
        for layer in self.layer_paths(spec):
            paths += [str(layer / "lib" / spec.runtime / "site-packages"), str(layer)]
        return paths

    @contextmanager
    def running(self, spec: FunctionSpec) -> Iterator[None]:
        """Around a handler's call, on its thread: the engine's hooks, its log, its variables."""
        with (
            self.around(),
            FUNCTION_OUTPUT.running_function(self.function_log),
            function_environment(self._initialized(spec), self.import_paths(spec)),
        ):
            try:
                yield
            except ModuleNotFoundError as exc:  # for the command to say (cli/session.py)
                self.missing[spec.name] = str(exc.name)
                raise

    def _initialized(self, spec: FunctionSpec) -> Mapping[str, str | None]:
        """The os.environ an invocation starts from: as its init left it (its template's
        and Lambda's variables before its first load, or with an override's handler)."""
        initialized = self._environments.get(spec.name)
        return spec.variables() if initialized is None else initialized

    def _provider(self, spec: FunctionSpec) -> Path | None:
        """The directory or file its handler's top module is imported from, if it is there."""
        top = _top_module(spec)
        for path in self.import_paths(spec):
            for found in (Path(path, top), Path(path, f"{top}.py")):
                if found.exists():
                    return found
        return None

    def _refuse_shared_names(self) -> None:
        """On Lambda each function imports in a sandbox of its own; here one Python imports
        them all, where a name is one module: two handlers whose top modules have one name
        but are two directories (sam init's hello_world/app.py beside another app.py, a
        Cookbook-style service/ beside onceflow's), or one named like a library the engine
        runs on, are refused rather than answered with the other's code."""
        seen: dict[str, tuple[str, Path]] = {}
        for spec in self.functions.values():
            top, mine = _top_module(spec), self._provider(spec)
            if mine is None:
                continue  # its load says Runtime.ImportModuleError, as Lambda does
            library = _origin(sys.modules.get(top))
            other, theirs = seen.setdefault(top, (spec.logical_id, mine))
            if theirs != mine or _under(library, _LIBRARIES):
                whose = f"{other}'s ({theirs})" if theirs != mine else f"a library ({library})"
                raise EngineError(
                    f"{spec.logical_id}: its module '{top}' ({mine}) and {whose} have one "
                    "name: on Lambda each function imports in its own sandbox, the local "
                    "engine imports every function in one Python, where one name is one "
                    f"module; rename '{top}' (its file or directory, and the Handler) to run it"
                    " here"
                )

    def cold_start(self) -> None:
        """Forget every module imported from a function's code root: a new deployment starts
        new sandboxes, so module-level state (settings, clients, caches) must not leak from
        an earlier engine in this process into this one."""
        guard_powertools()
        self.loaded_at = time.time()
        for spec in self.functions.values():
            _CODE_ROOTS.update(self.import_paths(spec))
        services = {
            spec.environment.get("POWERTOOLS_SERVICE_NAME", "service_undefined")
            for spec in self.functions.values()
        }
        with _IMPORT_LOCK:
            _forget_function_modules({_top_module(spec) for spec in self.functions.values()})
            self._refuse_shared_names()
            self._handlers.clear()
            self._environments.clear()
            # Powertools configures the service's stdlib logger once per process and marks
            # it ("init", "powertools_handler" ...); a re-imported Logger() would keep an
            # earlier engine's level. Unmark it.
            for service in services:
                std_logger = logging.getLogger(str(service))
                std_logger.handlers.clear()
                for mark in [a for a in vars(std_logger) if a == "init" or "powertools" in a]:
                    delattr(std_logger, mark)

    def load(self, spec: FunctionSpec) -> Callable[[Any, Any], Any]:
        """The function's handler. One that cannot be loaded (no such module or function,
        a module that does not compile or raises) is not kept: what is handed out raises
        the Python runtime's error at every call, and the next load imports again, as
        Lambda answers each invocation with the failed init's error and inits again at the
        next one. ``load_errors`` names it meanwhile, for the command to say."""
        with _IMPORT_LOCK:
            if spec.name not in self._handlers:
                paths = self.import_paths(spec)  # first: before another app's of one name
                if sys.path[: len(paths)] != paths:
                    sys.path[:] = paths + [p for p in sys.path if p not in paths]
                _CODE_ROOTS.update(paths)
                retry = spec.name in self.load_errors
                if retry:  # its module may have changed since: imported afresh, as a new init
                    sys.modules.pop(spec.handler.rpartition(".")[0].replace("/", "."), None)
                try:
                    with (  # its init: module-level reads and prints are the function's
                        function_environment(spec.variables(), paths) as initialized,
                        FUNCTION_OUTPUT.running_function(self.function_log),
                    ):
                        handler = _import_handler(spec.handler, retry=retry)
                except Exception as exc:  # the user's code: Lambda's answer to every call
                    self.load_errors[spec.name] = f"{type(exc).__name__}: {exc}"
                    return _raising(exc)
                self.load_errors.pop(spec.name, None)
                self._handlers[spec.name] = handler
                # what its init left in os.environ, each invocation's start (one process
                # runs a sandbox's init and invocations on Lambda)
                self._environments[spec.name] = initialized
            return self._handlers[spec.name]

    def invoke(self, name: str, event: Any) -> tuple[Any, str | None]:
        """Run the handler; returns (payload, error type or None)."""
        spec = self.functions[name]
        handler = self.overrides.get(name) or self.load(spec)
        context = LambdaContext(spec.name, spec.arn, spec.memory, spec.timeout)
        started = time.perf_counter()
        error_type: str | None = None
        try:
            with self.running(spec):
                payload = handler(event, context)
        except Exception as exc:  # reported to the caller as Lambda does
            error_type = type(exc).__name__
            payload = error_payload(exc, context, spec.code_uri, self.layer_paths(spec))
        duration = (time.perf_counter() - started) * 1000
        with self._lock:
            self.invocations.append(Invocation(name, context.aws_request_id, error_type, duration))
        return payload, error_type

    def moto_invoker(self, name: str) -> Callable[[Any], tuple[str, bool, str]]:
        """The (body, errored, logs) triple moto's Lambda backend expects."""

        def invoke(event: Any) -> tuple[str, bool, str]:
            # moto has decoded the body (a JSON string arrives as that string); an empty
            # body arrives as the text "{}".
            payload, error_type = self.invoke(name, {} if event == "{}" else event)
            if isinstance(payload, bytes | bytearray):
                # The Python runtime sends bytes as they are: they are the answer's body.
                return bytes(payload).decode("utf-8", "replace"), error_type is not None, ""
            if error_type is not None:
                return json.dumps(payload, default=str), True, ""
            try:
                return marshal(payload), False, ""
            except (TypeError, ValueError) as exc:  # the runtime's answer: the work was done
                fault = {
                    "errorMessage": f"Unable to marshal response: {exc}",
                    "errorType": "Runtime.MarshalError",
                    "requestId": "",
                    "stackTrace": [],
                }
                return json.dumps(fault), True, ""

        return invoke
