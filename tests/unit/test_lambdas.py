"""The in-process Lambda runtime: what running handlers on threads must not break."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from onceflow.local import lambdas


def _race(invocation: Callable[[int], None], threads_count: int) -> None:
    """Run invocation(0..n-1) on n threads, switching between them as often as Python can."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=invocation, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def test_concurrent_invocations_sharing_a_powertools_logger_lose_no_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Several invocations changing one Logger's keys while others log: each line whole.

    Without the guard, a line formatted while another thread adds or removes a
    key raises "dictionary changed size during iteration", which logging
    prints as "--- Logging error ---" and drops the line.
    """
    from aws_lambda_powertools import Logger

    lambdas.guard_powertools()
    stream = io.StringIO()
    logger = Logger(service="onceflow-race-probe", stream=stream, level="INFO")
    logger.append_keys(**{f"base{j}": j for j in range(200)})  # a long iteration to race
    lines_per_thread, threads_count = 300, 8

    def invocation(n: int) -> None:
        for i in range(lines_per_thread):
            logger.append_keys(**{f"k{n}_{i % 7}": i})
            logger.info("line")
            logger.remove_keys([f"k{n}_{i % 7}"])

    _race(invocation, threads_count)
    assert "Logging error" not in capsys.readouterr().err
    assert stream.getvalue().count('"message":"line"') == lines_per_thread * threads_count


def test_the_guard_is_installed_once() -> None:
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

    lambdas.guard_powertools()
    assert lambdas.guard_powertools() == []
    for name in lambdas._FORMATTER_STEPS:
        assert getattr(LambdaPowertoolsFormatter, name).onceflow_guarded
    for name in lambdas._METRICS_STEPS:
        assert getattr(AmazonCloudWatchEMFProvider, name).onceflow_guarded


def test_concurrent_invocations_sharing_powertools_metrics_neither_fail_nor_lose_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each invocation adds metrics and flushes at its end, on one shared Metrics.

    Without the guard, a flush serialising the set while another invocation
    adds to it raises "dictionary changed size during iteration": the
    invocation fails after its work is done.
    """
    import json
    import warnings

    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    lambdas.guard_powertools()
    metrics = Metrics(namespace="onceflow-race-probe", service="probe")
    errors: list[BaseException] = []
    rounds, per_round, threads_count = 150, 10, 8

    def invocation(n: int) -> None:
        for _ in range(rounds):
            try:
                for j in range(per_round):
                    metrics.add_metric(name=f"m{n}_{j}", unit=MetricUnit.Count, value=1)
                metrics.flush_metrics()
            except Exception as exc:  # collected, and asserted below
                errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an invocation finding its set flushed by another
        _race(invocation, threads_count)
    assert errors == []
    counted = 0
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{"):
            blob = json.loads(line)
            # only this probe's namespace: an engine another test left running on this
            # worker may print its own functions' metrics here meanwhile
            for directive in blob.get("_aws", {}).get("CloudWatchMetrics", []):
                if directive["Namespace"] != "onceflow-race-probe":
                    continue
                for metric in directive["Metrics"]:
                    value = blob[metric["Name"]]
                    counted += len(value) if isinstance(value, list) else int(value)
    assert counted == rounds * per_round * threads_count  # each metric flushed once


def test_a_cold_start_forgets_the_modules_and_the_logger_an_earlier_engine_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_lambda_powertools import Logger

    monkeypatch.syspath_prepend(str(tmp_path))  # where load() puts the code root, undone

    # GIVEN a function whose module was imported, and its service's logger configured
    (tmp_path / "probe_handler.py").write_text("def handler(event, context):\n    return 1\n")
    service = f"onceflow-cold-start-probe-{id(tmp_path)}"
    spec = lambdas.FunctionSpec(
        "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe", tmp_path,
        "probe_handler.handler", 3.0, 128, {"POWERTOOLS_SERVICE_NAME": service},
    )  # fmt: skip
    runtime = lambdas.InProcessRuntime()
    runtime.register(spec)
    assert runtime.invoke("probe", {}) == (1, None)
    Logger(service=service, level="DEBUG")
    assert "probe_handler" in sys.modules
    # WHEN a new engine's cold start comes
    runtime.cold_start()
    # THEN the module is imported afresh and a new Logger takes its own level
    assert "probe_handler" not in sys.modules
    assert Logger(service=service, level="WARNING").log_level == logging.WARNING


def test_a_function_of_another_code_root_with_the_same_package_gets_its_own_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there: undone
    # GIVEN two apps whose functions are the same package name (an app `onceflow init` made
    # beside onceflow's own, each functions/service/...), each answering with its own name
    specs = []
    for app in ("first", "second"):
        package = tmp_path / app / "probe_pkg"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "handler.py").write_text(f"def handler(event, context):\n    return {app!r}\n")
        specs.append(lambdas.FunctionSpec(
            "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe",
            tmp_path / app, "probe_pkg.handler.handler", 3.0, 128, {},
        ))  # fmt: skip
    # WHEN an engine runs the first app's, then another (its cold start) the second's, then
    # a third the first's again
    answers = []
    for spec in (specs[0], specs[1], specs[0]):
        runtime = lambdas.InProcessRuntime()
        runtime.register(spec)
        runtime.cold_start()
        answers.append(runtime.invoke("probe", {})[0])
    # THEN each runs its own code, not the package an earlier engine imported
    assert answers == ["first", "second", "first"]
    for name in [n for n in sys.modules if n.split(".")[0] == "probe_pkg"]:
        del sys.modules[name]


def test_a_cold_start_keeps_the_engines_own_library_a_function_vendors_too(
    tmp_path: Path,
) -> None:
    import yaml

    # GIVEN a function whose CodeUri vendors a library the engine itself runs on (pip
    # install -t, as AWS's zip recipe does), never loaded from there yet
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("STUB = True\n")
    (tmp_path / "probe_vendoring.py").write_text("def handler(event, context):\n    return 1\n")
    runtime = lambdas.InProcessRuntime()
    runtime.register(lambdas.FunctionSpec(
        "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe", tmp_path,
        "probe_vendoring.handler", 3.0, 128, {},
    ))  # fmt: skip
    try:
        # WHEN an engine's cold start comes
        runtime.cold_start()
        # THEN the engine's own copy (site-packages) is still the one imported
        assert sys.modules.get("yaml") is yaml
    finally:
        sys.modules["yaml"] = yaml


def test_a_handler_fixed_after_handler_not_found_is_loaded_at_the_next_invocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code root there: undone
    # GIVEN a module whose function is not the one Handler names
    module = tmp_path / "probe_renamed.py"
    module.write_text("def handle(event, context):\n    return 1\n")
    runtime = lambdas.InProcessRuntime()
    runtime.register(lambdas.FunctionSpec(
        "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe", tmp_path,
        "probe_renamed.handler", 3.0, 128, {},
    ))  # fmt: skip
    try:
        payload, error = runtime.invoke("probe", {})
        assert error is not None and "HandlerNotFound" in str(error) + json.dumps(payload)
        # WHEN the user renames it, as the error says, and the function is invoked again
        module.write_text("def handler(event, context):\n    return 'fixed'\n")
        # THEN the new code answers, as Lambda's next init would import it
        assert runtime.invoke("probe", {}) == ("fixed", None)
    finally:
        sys.modules.pop("probe_renamed", None)


# LocalStack's raise_exception.py (tests/aws/services/stepfunctions/templates/errorhandling/
# lambdafunctions/), which its recordings deploy as handler.py.
RAISE_EXCEPTION = (
    'def handler(event, context):\n    raise Exception("Some exception was raised.")\n'
)
RECORDED_TRACE = [
    '  File "/var/task/handler.py", line 2, in handler\n'
    '    raise Exception("Some exception was raised.")\n'
]


def _function(code_root: Path, source: str) -> lambdas.FunctionSpec:
    (code_root / "handler.py").write_text(source)
    name = f"raiser{id(code_root)}"
    arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
    return lambdas.FunctionSpec(name, name, arn, code_root, "handler.handler", 3.0, 128, {})


def _invokers(
    runtime: lambdas.InProcessRuntime,
) -> list[Callable[[str, Any], tuple[Any, str | None]]]:
    """Both ways the engine runs a handler: the runtime's own, and with the Timeout."""
    from onceflow.local.limits.lambda_timeout import TimedInvoke

    engine = SimpleNamespace(runtime=runtime, function_log=io.StringIO())
    return [runtime.invoke, TimedInvoke(engine)]  # type: ignore[arg-type]


@pytest.mark.parametrize("way", [0, 1])
def test_a_handler_that_raises_answers_as_the_python_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: int
) -> None:
    """Recorded: test_error_output.snapshot.json (TestStateVariablesTemplate::
    test_task_catch_error_output and its Map and Parallel cases) and
    test_task_lambda.snapshot.json (TestTaskLambda::test_raise_exception): errorMessage,
    errorType, requestId, and a stackTrace of the handler's frames only, its file under
    /var/task, its real line."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "handler", raising=False)
    runtime = lambdas.InProcessRuntime()
    runtime.register(spec := _function(tmp_path, RAISE_EXCEPTION))
    payload, error = _invokers(runtime)[way](spec.name, {})
    assert error == "Exception"
    assert payload == {
        "errorMessage": "Some exception was raised.",
        "errorType": "Exception",
        "requestId": runtime.invocations[-1].request_id,
        "stackTrace": RECORDED_TRACE,
    }


def test_library_frames_are_named_where_the_lambda_sandbox_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime keeps every frame from the handler's on (awslambdaric's bootstrap.py
    drops only its own): a packaged dependency under /var/task, the standard library
    and boto3 under /var/lang/lib/pythonX.Y (not verified against AWS's docs: payloads
    users posted from python3.12 show them there), no line from the engine."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "handler", raising=False)
    source = (
        "import json, boto3\nfrom aws_lambda_powertools.utilities.data_classes import SQSEvent\n"
        "def handler(event, context):\n"
        "    if event == 'json':\n        json.loads('{')\n"
        "    if event == 'sqs':\n        list(SQSEvent({}).records)\n"
        "    boto3.client('no-such-service')\n"
    )
    runtime = lambdas.InProcessRuntime()
    runtime.register(spec := _function(tmp_path, source))
    lang = f"/var/lang/lib/python{sys.version_info.major}.{sys.version_info.minor}"
    for event, library in (
        ("json", f"{lang}/json/"),
        ("sdk", f"{lang}/site-packages/bot"),
        ("sqs", "/var/task/aws_lambda_powertools/"),
    ):
        payload, _ = runtime.invoke(spec.name, event)
        files = [line.split('"')[1] for line in payload["stackTrace"]]
        assert files[0] == "/var/task/handler.py", files
        assert all(f.startswith(library) for f in files[1:]), files
        assert files[1:], files


def test_a_result_the_python_runtime_cannot_marshal_is_its_marshal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """awslambdaric's lambda_runtime_marshaller.py (aws-lambda-python-runtime-interface-
    client): the result is encoded with simplejson, a Decimal as its number (str(obj), raw),
    anything else JSON has no type for refused: Runtime.MarshalError, "Unable to marshal
    response: ..."; the function's work is done, its answer is that error."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "handler", raising=False)
    source = (
        "import datetime, decimal\n\n"
        "def handler(event, context):\n"
        "    if event == 'time':\n"
        "        return {'at': datetime.datetime(2026, 1, 1)}\n"
        "    big = decimal.Decimal('12345678901234567890')\n"
        "    if event == 'infinite':\n"
        "        return {'price': decimal.Decimal('Infinity')}\n"
        "    return {'price': decimal.Decimal('1.5'), 'big': big, 'one': decimal.Decimal('1.0')}\n"
    )
    runtime = lambdas.InProcessRuntime()
    runtime.register(spec := _function(tmp_path, source))
    invoke = runtime.moto_invoker(spec.name)
    # WHEN a function returns a datetime, then Decimals (as boto3's DynamoDB resource reads)
    refused, refused_errored, _ = invoke("time")
    numbers, numbers_errored, _ = invoke("numbers")
    # THEN the first answers Lambda's marshal error, the second its numbers as numbers
    assert refused_errored is True
    answer = json.loads(refused)
    assert answer["errorType"] == "Runtime.MarshalError"
    assert answer["errorMessage"] == (
        "Unable to marshal response: Object of type datetime is not JSON serializable"
    )
    assert numbers_errored is False
    assert json.loads(numbers) == {"price": 1.5, "big": 12345678901234567890, "one": 1.0}
    assert '"one": 1.0' in numbers  # as simplejson writes str(Decimal('1.0')), not 1
    # AND a Decimal JSON has no number for is the marshal error too, not a crash
    infinite, infinite_errored, _ = invoke("infinite")
    assert infinite_errored is True
    assert json.loads(infinite)["errorType"] == "Runtime.MarshalError"


def test_functions_invoked_at_once_each_see_their_own_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there: undone
    monkeypatch.setenv("PROBE_SHARED", "the process's")
    # GIVEN two functions of different code roots giving one variable different values,
    # each reading it at import (a module-level Logger does) and at every invocation
    runtime = lambdas.InProcessRuntime()
    for app in ("red", "blue"):
        (tmp_path / app).mkdir()
        (tmp_path / app / f"probe_env_{app}.py").write_text(
            "import os\nAT_IMPORT = os.environ['PROBE_SHARED']\n\n\n"
            "def handler(event, context):\n"
            "    return [AT_IMPORT, os.environ['PROBE_SHARED'], os.getenv('PROBE_SHARED'),\n"
            "            dict(os.environ)['PROBE_SHARED'], os.environ['LAMBDA_TASK_ROOT']]\n"
        )
        runtime.register(lambdas.FunctionSpec(
            app, app, f"arn:aws:lambda:us-east-1:123456789012:function:{app}", tmp_path / app,
            f"probe_env_{app}.handler", 3.0, 128, {"PROBE_SHARED": app},
        ))  # fmt: skip
    lambdas.FUNCTION_OUTPUT.install()  # as an engine's start does
    try:
        runtime.cold_start()
        answers: dict[int, list[Any]] = {}

        # WHEN both are invoked on many threads at once
        def invocation(n: int) -> None:
            answers[n] = runtime.invoke("red" if n % 2 else "blue", {})[0]

        _race(invocation, 8)
        # THEN each saw its own value, at import and in every call, and its own code root;
        # a thread that runs no function sees the process's
        for n, answer in answers.items():
            app = "red" if n % 2 else "blue"
            assert answer == [app] * 4 + [str((tmp_path / app).resolve())]
        assert os.environ["PROBE_SHARED"] == "the process's"
    finally:
        lambdas.FUNCTION_OUTPUT.uninstall()
        for app in ("red", "blue"):
            sys.modules.pop(f"probe_env_{app}", None)
    assert type(os.environ).__name__ == "_Environ"


def test_a_namespace_package_of_an_earlier_engine_does_not_answer_for_a_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there: undone
    # GIVEN an app whose handler is in a package without __init__.py (a namespace package,
    # which Lambda's Python imports too), run by an engine
    first = tmp_path / "first" / "probe_ns" / "handlers"
    first.mkdir(parents=True)
    (first / "main.py").write_text("def handler(event, context):\n    return 'first'\n")
    # AND another app with the same handler in a regular package whose __init__ sets a name
    second = tmp_path / "second" / "probe_ns"
    (second / "handlers").mkdir(parents=True)
    (second / "__init__.py").write_text("NAME = 'second'\n")
    (second / "handlers" / "main.py").write_text(
        "from probe_ns import NAME\n\n\ndef handler(event, context):\n    return NAME\n"
    )
    answers = []
    try:
        for root in (tmp_path / "first", tmp_path / "second"):
            # WHEN an engine runs each, one after the other
            runtime = lambdas.InProcessRuntime()
            runtime.register(lambdas.FunctionSpec(
                "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe", root,
                "probe_ns/handlers/main.handler", 3.0, 128, {},
            ))  # fmt: skip
            runtime.cold_start()
            answers.append(runtime.invoke("probe", {}))
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "probe_ns"]:
            del sys.modules[name]
    # THEN the second runs its own package, its __init__ included
    assert answers == [("first", None), ("second", None)]


def test_a_functions_writes_to_its_environment_stay_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there: undone
    monkeypatch.setenv("PROBE_PROCESS", "the process's")
    monkeypatch.delenv("PROBE_WRITTEN", raising=False)
    # GIVEN a function that sets a variable and deletes two (its own and the process's),
    # as code may (os.environ is its sandbox's on Lambda), and one that only reads them
    (tmp_path / "writer").mkdir()
    (tmp_path / "writer" / "probe_env_writer.py").write_text(
        "import os\n\n\n"
        "def handler(event, context):\n"
        "    os.environ['PROBE_WRITTEN'] = 'the writer\\'s'\n"
        "    os.environ['PROBE_MINE'] = 'changed'\n"
        "    del os.environ['PROBE_PROCESS']\n"
        "    return [os.environ.get('PROBE_WRITTEN'), os.environ.get('PROBE_PROCESS'),\n"
        "            'PROBE_PROCESS' in dict(os.environ), os.environ.pop('PROBE_MINE')]\n"
    )
    (tmp_path / "reader").mkdir()
    (tmp_path / "reader" / "probe_env_reader.py").write_text(
        "import os\n\n\n"
        "def handler(event, context):\n"
        "    return [os.environ.get('PROBE_WRITTEN'), os.environ.get('PROBE_PROCESS')]\n"
    )
    runtime = lambdas.InProcessRuntime()
    for app, variables in (("writer", {"PROBE_MINE": "mine"}), ("reader", {})):
        runtime.register(lambdas.FunctionSpec(
            app, app, f"arn:aws:lambda:us-east-1:123456789012:function:{app}", tmp_path / app,
            f"probe_env_{app}.handler", 3.0, 128, variables,
        ))  # fmt: skip
    lambdas.FUNCTION_OUTPUT.install()  # as an engine's start does
    try:
        runtime.cold_start()
        # WHEN the writer runs, then the reader
        written = runtime.invoke("writer", {})[0]
        read = runtime.invoke("reader", {})[0]
        # THEN the writer saw its writes...
        assert written == ["the writer's", None, False, "changed"]
        # ...and they stayed its own: the other function and the process see none of them
        assert read == [None, "the process's"]
        assert os.environ.get("PROBE_WRITTEN") is None
        assert os.environ["PROBE_PROCESS"] == "the process's"
        assert os.environ.get("PROBE_MINE") is None
    finally:
        lambdas.FUNCTION_OUTPUT.uninstall()
        for app in ("writer", "reader"):
            sys.modules.pop(f"probe_env_{app}", None)
    assert os.getenv("PROBE_WRITTEN") is None  # nor after the engines stopped


def test_an_import_hook_installed_before_an_engine_outlives_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    # GIVEN an __import__ hook of the process's (a profiler's, a test tool's), installed
    # after onceflow.local.lambdas was imported and before an engine starts
    seen: list[str] = []
    original = builtins.__import__

    def hook(name: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", hook)
    lambdas.FUNCTION_OUTPUT.install()  # as an engine's start does
    try:
        # WHEN code imports while the engine runs
        exec("import json")  # an import statement, not importlib's
        # THEN the hook still sees it
        assert "json" in seen
    finally:
        lambdas.FUNCTION_OUTPUT.uninstall()
    # AND it is still in place once the engine stopped
    assert builtins.__import__ is hook


def test_what_a_function_writes_to_its_environment_at_init_its_invocations_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the code roots there: undone
    monkeypatch.delenv("PROBE_INIT", raising=False)
    # GIVEN a function whose module sets a variable and deletes one of its own as it loads
    # (its init: on Lambda the same process then runs its invocations)
    (tmp_path / "init").mkdir()
    (tmp_path / "init" / "probe_env_init.py").write_text(
        "import os\n\n"
        "os.environ['PROBE_INIT'] = 'set at init'\n"
        "del os.environ['PROBE_GONE']\n\n\n"
        "def handler(event, context):\n"
        "    return [os.environ.get('PROBE_INIT'), os.environ.get('PROBE_GONE')]\n"
    )
    runtime = lambdas.InProcessRuntime()
    runtime.register(lambdas.FunctionSpec(
        "init", "init", "arn:aws:lambda:us-east-1:123456789012:function:init", tmp_path / "init",
        "probe_env_init.handler", 3.0, 128, {"PROBE_GONE": "template's"},
    ))  # fmt: skip
    lambdas.FUNCTION_OUTPUT.install()  # as an engine's start does
    try:
        runtime.cold_start()
        # WHEN it is invoked, twice
        answers = [runtime.invoke("init", {}) for _ in range(2)]
        # THEN each invocation sees what its init wrote; the process does not
        assert answers == [(["set at init", None], None)] * 2
        assert os.environ.get("PROBE_INIT") is None
    finally:
        lambdas.FUNCTION_OUTPUT.uninstall()
        sys.modules.pop("probe_env_init", None)
