"""Replay Step Functions behaviour recorded on AWS on the local engine, and say what differs.

The recordings are LocalStack's Step Functions suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/): each `*.snapshot.json` keeps, per test, what real AWS
answered (the test is marked `@markers.aws.validated` and listed in the `.validation.json`
beside it). For each recording whose execution history was kept, this module finds the
definition the test ran (the template it loads, resolved by reading the test's source),
the input text it started the execution with, the resources it made first and the snapshot
transformers it registered (recordings.py), runs them on onceflow's
LocalEngine (a fresh engine for each recording: nothing one leaves behind is seen by the
next), writes the local history through the snapshot transformers the recording was
written through (`snapshot.py`: LocalStack's, with the local run's own names and ARNs),
and compares it with the recording, as recorded, event by event.

Each difference is classed by the direction it errs:
- kinder: AWS failed (or raised an error) where the local run did not;
- harsher: the local run failed (or raised an error, or refused the definition) where
  AWS did not;
- value: both took the same outcome, but a value or a text differs.

A recording counts as "in scope" when its definition uses only what onceflow's own state
machines use (query language, state types, fields, Task resources), read from the
engine's provisioned state machines.

    .venv/bin/python -m tests.parity.replay [--filter X] [--scope] [--source DIR_OR_GIT_DIR]
    .venv/bin/python -m tests.parity.replay --filter base/ --export tests/parity/recorded.json
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import sys
import tempfile
import uuid
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onceflow.local import provisioning
from onceflow.local.engine import LocalEngine
from onceflow.local.lambdas import FunctionSpec
from tests.parity import api
from tests.parity.recordings import ROLE, Case, Skip, discover, parameters, suite_root
from tests.parity.snapshot import Run, Spec, map_run_arns, transform

MIRROR = Path("/work/.mirror/localstack+localstack/repo")


@dataclass
class Outcome:
    key: str
    snapshot: str
    verdict: str  # same | differs
    kind: str = ""  # kinder | harsher | value (differs only)
    diff: list[str] = field(default_factory=list)
    in_scope: bool = True
    outside: list[str] = field(default_factory=list)  # features onceflow does not use

    @property
    def directory(self) -> str:
        return self.snapshot.split("/")[1]


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "the replay runs this function in-process")
    return buffer.getvalue()


_EMPTY_ZIP = _zip()

# The engine each recording replays on: nothing of onceflow's stack (the recordings bring
# their own resources), so a fresh one starts in a fraction of a second.
_BARE_TEMPLATE = """\
AWSTemplateFormatVersion: '2010-09-09'
Transform: AWS::Serverless-2016-10-31
Resources:
  Unused:
    Type: AWS::SQS::Queue
"""


def _resort(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of zeroed-id events (SfnNoneRecursiveParallelTransformer's, ids [0]) sorted by
    their transformed text, on both sides: LocalStack sorts them by their text before the
    placeholders are written, so AWS's order follows AWS's raw names and the local order
    the local ones. The events of each run are compared as a set, value for value."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for event in [*events, {"id": None}]:
        if event.get("id") == [0]:
            run.append(event)
            continue
        out.extend(sorted(run, key=lambda e: json.dumps(e, sort_keys=True)))
        run = []
        if event.get("id") is not None:
            out.append(event)
    return out


def written_as_recorded(
    events: list[dict[str, Any]], specs: list[Spec], execution_arn: str
) -> list[dict[str, Any]]:
    """A local history as LocalStack's snapshot session would have written it."""
    run = Run(execution_arn, map_run_arns(events))
    observed = {"get_execution_history": {"events": events}}
    written = transform(observed, specs, run)["get_execution_history"]["events"]
    return list(written)


# ---- comparing -----------------------------------------------------------------

_END = {"ExecutionSucceeded": "SUCCEEDED", "ExecutionFailed": "FAILED"}


def _status(events: list[dict[str, Any]]) -> str:
    last = events[-1]["type"] if events else ""
    return _END.get(last, last.removeprefix("Execution").upper() or "NONE")


def _errors(events: list[dict[str, Any]]) -> Counter[str]:
    found: Counter[str] = Counter()
    for event in events:
        for key, details in event.items():
            if key.endswith("EventDetails") and isinstance(details, dict) and "error" in details:
                found[str(details["error"])] += 1
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 90 else text[:87] + "..."


def _diff(recorded: Any, local: Any, path: str, out: list[str]) -> None:
    if isinstance(recorded, dict) and isinstance(local, dict):
        for key in sorted(set(recorded) | set(local)):
            if key not in local:
                out.append(f"{path}.{key}: AWS {_short(recorded[key])}, local missing")
            elif key not in recorded:
                out.append(f"{path}.{key}: AWS missing, local {_short(local[key])}")
            else:
                _diff(recorded[key], local[key], f"{path}.{key}", out)
    elif recorded != local:
        out.append(f"{path}: AWS {_short(recorded)}, local {_short(local)}")


def compare(recorded: list[dict[str, Any]], local: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """('' when the same, else kinder/harsher/value) and the differences, compact."""
    diff: list[str] = []
    rec_types = [e["type"] for e in recorded]
    loc_types = [e["type"] for e in local]
    if rec_types != loc_types:
        first = next(
            (i for i, (a, b) in enumerate(zip(rec_types, loc_types, strict=False)) if a != b),
            min(len(rec_types), len(loc_types)),
        )
        diff.append(
            f"events from #{first + 1}: AWS {rec_types[first : first + 4]}, "
            f"local {loc_types[first : first + 4]}"
        )
        # Compare the common prefix too: it often shows why.
        for index in range(first):
            _diff(recorded[index], local[index], f"#{index + 1}", diff)
    else:
        for index, (a, b) in enumerate(zip(recorded, local, strict=True)):
            _diff(a, b, f"#{index + 1} {a['type']}", diff)
    if not diff:
        return "", []
    aws_status, local_status = _status(recorded), _status(local)
    aws_errors, local_errors = _errors(recorded), _errors(local)
    if aws_status != "SUCCEEDED" and local_status == "SUCCEEDED":
        kind = "kinder"
    elif aws_status == "SUCCEEDED" and local_status != "SUCCEEDED":
        kind = "harsher"
    elif aws_errors and not local_errors:
        kind = "kinder"
    elif local_errors and not aws_errors:
        kind = "harsher"
    elif set(aws_errors) - set(local_errors) and not set(local_errors) - set(aws_errors):
        kind = "kinder"  # AWS raised an error the local run never did
    else:
        kind = "value"
    return kind, diff


# ---- scope: what onceflow's own state machines use -------------------------------


def features(definition: dict[str, Any], query_language: str | None = None) -> set[str]:
    """A definition's features: query language, state types and fields, Task resources."""
    found: set[str] = set()
    language = definition.get("QueryLanguage", query_language or "JSONPath")
    for state in definition.get("States", {}).values():
        kind = state.get("Type", "?")
        state_language = state.get("QueryLanguage", language)
        found.add(f"QueryLanguage:{state_language}")
        found.update(f"{kind}.{name}" for name in state)
        if kind == "Task":
            found.add("Resource:" + re.sub(r"\$\{[^}]*\}", "", str(state.get("Resource", "")))[:60])
        if kind == "Map":
            processor = state.get("ItemProcessor") or state.get("Iterator") or {}
            mode = processor.get("ProcessorConfig", {}).get("Mode", "INLINE")
            found.add(f"Map.Mode:{mode}")
            found |= features(processor, state_language)
        for branch in state.get("Branches", []):
            found |= features(branch, state_language)
    return found


# Fields every state may carry whatever it does.
_STRUCTURAL = ("End", "Next", "Comment", "Type", "QueryLanguage")


def onceflow_features(engine: LocalEngine) -> set[str]:
    """What onceflow's state machines use (every one in the template, conditional or not:
    read as the file holds it, its substitutions unreplaced, since a machine whose condition
    is false has none to give: the batch's SourceQueueUrl without a source queue)."""
    from onceflow.asl.batch_definition import parse_definition

    used: set[str] = set()
    for resource in engine.stack.template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::StateMachine":
            path = engine.stack.root / resource["Properties"]["DefinitionUri"]
            used |= features(parse_definition(path.read_text(encoding="utf-8")))
    kinds = {f.split(".")[0] for f in used if "." in f and ":" not in f.split(".")[0]}
    return used | {f"{kind}.{name}" for kind in kinds for name in _STRUCTURAL}


# ---- replaying -----------------------------------------------------------------


class Replayer:
    """Replays each case on a fresh engine; used: onceflow's features (None: not judged)."""

    def __init__(self, used: set[str] | None = None) -> None:
        self.used = used
        self.folder = Path(tempfile.mkdtemp(prefix="replay-"))
        self.template = self.folder / "template.yaml"
        self.template.write_text(_BARE_TEMPLATE)

    def create_function(
        self, engine: LocalEngine, name: str, source: str, timeout: int = 30
    ) -> None:
        """A Lambda function running the recorded test's handler file, in-process, named as
        LocalStack's create_lambda_function deploys it (handler.py, handler.handler: AWS's
        stack traces say "/var/task/handler.py")."""
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.folder))
        (folder / "handler.py").write_text(source)
        spec_file = importlib.util.spec_from_file_location(f"replay_{name}", folder / "handler.py")
        assert spec_file is not None and spec_file.loader is not None
        module = importlib.util.module_from_spec(spec_file)
        spec_file.loader.exec_module(module)
        arn = engine.client("lambda").create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=provisioning.execution_role(engine),
            Handler="handler.handler",
            Code={"ZipFile": _EMPTY_ZIP},
            Timeout=timeout,
        )["FunctionArn"]
        spec = FunctionSpec(name, name, arn, folder, "handler.handler", timeout, 128, {})
        engine.runtime.register(spec)
        engine.runtime.overrides[name] = module.handler
        engine.state.invokers[name] = engine.runtime.moto_invoker(name)

    def replay(self, case: Case | api.ApiCase) -> Outcome:
        if isinstance(case, api.ApiCase):
            return self.replay_api(case)
        outside = sorted(features(case.definition) - self.used) if self.used is not None else []
        outcome = Outcome(case.key, case.snapshot, "same", in_scope=not outside, outside=outside)
        local = self.local_history(case, outcome)
        if local is None:
            return outcome
        recorded = case.recorded
        if any(spec.kind == "parallel" for spec in case.specs):
            local, recorded = _resort(local), _resort(recorded)
        kind, diff = compare(recorded, local)
        if kind:
            outcome.verdict, outcome.kind, outcome.diff = "differs", kind, diff
        return outcome

    def replay_api(self, case: api.ApiCase) -> Outcome:
        """The recorded API test run on an engine of its own, its answers compared key by
        key (tests/parity/api.py)."""
        # Waits at a twentieth of their time, not none: a test that stops an execution in
        # a Wait (test_stop_execution) must find it still waiting.
        with LocalEngine(self.template, function_log=io.StringIO(), time_scale=0.05) as engine:
            local = api.run_case(engine, self, case)
        outside = api.outside(local, self.used) if self.used is not None else []
        outcome = Outcome(case.key, case.snapshot, "same", in_scope=not outside, outside=outside)
        kind, diff = api.compare(case.recorded, local, case.recorded_date)
        if kind:
            outcome.verdict, outcome.kind, outcome.diff = "differs", kind, diff
        return outcome

    def local_history(self, case: Case, outcome: Outcome) -> list[dict[str, Any]] | None:
        """The case run on an engine of its own (what an earlier case made or left is not
        there), its history written as the recording was; None when the engine refused the
        definition (outcome says so)."""
        with LocalEngine(self.template, function_log=io.StringIO(), time_scale=0.0) as engine:
            return self._run(engine, case, outcome)

    def _run(
        self, engine: LocalEngine, case: Case, outcome: Outcome
    ) -> list[dict[str, Any]] | None:
        for name, source in case.functions.items():
            self.create_function(engine, name, source, case.timeouts.get(name, 30))
        for call in case.setup:
            client = engine.client(call["service"])
            getattr(client, call["operation"])(**parameters(call["params"]))
        sfn = engine.client("stepfunctions")
        try:
            arn = sfn.create_state_machine(
                name=case.machine_name or "statemachine_replay",
                definition=json.dumps(case.definition),
                roleArn=ROLE,
                type="EXPRESS" if case.kind == "EXPRESS" else "STANDARD",
            )["stateMachineArn"]
        except Exception as exc:  # the engine refused what AWS ran: that is the finding
            outcome.verdict, outcome.kind = "differs", "harsher"
            outcome.diff = [f"local refused the definition: {str(exc)[:160]}"]
            return None
        # Started as the test started it: its input text, its name or none (AWS's own).
        start: dict[str, Any] = {"stateMachineArn": arn}
        if case.input_text is not None:
            start["input"] = case.input_text
        elif case.input is not None:
            start["input"] = json.dumps(case.input)
        # Unnamed, AWS names an execution with a UUID (StartExecution's `name`: "If you don't
        # provide a name for the execution, Step Functions automatically generates a UUID");
        # the engine's API names it "None", so the replay gives the UUID itself.
        start["name"] = case.execution_name or str(uuid.uuid4())
        execution_arn = sfn.start_execution(**start)["executionArn"]
        result = engine.wait(execution_arn, timeout=15)
        return written_as_recorded(result.events, case.specs, result.arn)


def replay_all(cases: list[Case | api.ApiCase], used: set[str] | None = None) -> list[Outcome]:
    replayer = Replayer(used)
    outcomes = []
    for case in cases:
        try:
            outcomes.append(replayer.replay(case))
        except Exception as exc:  # one broken replay is reported, not the end of the run
            definition = case.definition if isinstance(case, Case) else {}
            outside = sorted(features(definition) - used) if used is not None else []
            outcomes.append(
                Outcome(
                    case.key,
                    case.snapshot,
                    "differs",
                    "harsher",
                    [f"replay raised {exc!r}"[:200]],
                    in_scope=not outside,
                    outside=outside,
                )
            )
    return outcomes


def onceflow_used() -> set[str]:
    """onceflow_features of the template, read on an engine that is stopped again."""
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as engine:
        return onceflow_features(engine)


# ---- the command line ----------------------------------------------------------


def _report(outcomes: list[Outcome], skips: list[Skip], scope_only: bool, verbose: bool) -> str:
    lines: list[str] = []
    for skip in skips if verbose else []:
        lines.append(f"skipped  {skip.key.split('::', 1)[-1]} ({skip.snapshot}): {skip.reason}")
    shown = [o for o in outcomes if o.in_scope or not scope_only]
    for outcome in shown:
        name = outcome.key.split("::", 1)[-1]
        scope = "" if outcome.in_scope else f" [outside onceflow: {', '.join(outcome.outside[:3])}]"
        if outcome.verdict == "same":
            lines.append(f"same     {outcome.snapshot} {name}{scope}")
        else:
            lines.append(f"differs  {outcome.kind:7} {outcome.snapshot} {name}{scope}")
            lines.extend(f"           {d}" for d in outcome.diff[:4])
    table: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        for group in (outcome.directory, "TOTAL"):
            row = table.setdefault(group, Counter())
            row["replayed"] += 1
            row[outcome.verdict] += 1
            if outcome.kind:
                row[outcome.kind] += 1
            if outcome.in_scope:
                row["scope"] += 1
                row["scope " + outcome.verdict] += 1
                if outcome.kind:
                    row["scope " + outcome.kind] += 1
    for skip in skips:
        table.setdefault(skip.snapshot.split("/")[1], Counter())["skipped"] += 1
        table.setdefault("TOTAL", Counter())["skipped"] += 1
    columns = ("replayed", "same", "differs", "kinder", "harsher", "value", "skipped")
    scoped = (
        "scope",
        "scope same",
        "scope differs",
        "scope kinder",
        "scope harsher",
        "scope value",
    )
    lines.append("")
    lines.append(
        f"{'directory':22}"
        + "".join(f"{c:>9}" for c in columns)
        + " | in onceflow's features: "
        + " ".join(c.removeprefix("scope ") for c in scoped)
    )
    for group in sorted(table, key=lambda g: (g == "TOTAL", g)):
        row = table[group]
        lines.append(
            f"{group:22}"
            + "".join(f"{row[c]:>9}" for c in columns)
            + " | "
            + " ".join(f"{row[c]:>5}" for c in scoped)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        help="replay only recordings whose id holds this (repeat for several)",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("SFN_RECORDINGS", MIRROR)),
        help="a localstack checkout, or its bare git dir",
    )
    parser.add_argument(
        "--scope", action="store_true", help="show only recordings in onceflow's features"
    )
    parser.add_argument(
        "--skipped", action="store_true", help="list the skipped recordings and why"
    )
    parser.add_argument(
        "--export", type=Path, help="write the replayable cases as JSON (for a fixed selection)"
    )
    parser.add_argument("--cases", type=Path, help="replay the cases of an --export file instead")
    args = parser.parse_args(argv)
    cases: list[Case | api.ApiCase]
    if args.cases:
        cases, skips = load_cases(args.cases), list[Skip]()
        cases = [c for c in cases if not args.filter or any(f in c.key for f in args.filter)]
    else:
        for root in suite_root(args.source):
            cases, skips = discover(root, args.filter)
    outcomes = replay_all(cases, onceflow_used())
    if args.export:
        # Each case keeps the verdict it had when selected: a test holds it there.
        for case, outcome in zip(cases, outcomes, strict=True):
            case.expected = outcome.kind or outcome.verdict
        args.export.write_text(json.dumps([asdict(c) for c in cases], indent=1) + "\n")
        print(f"wrote {len(cases)} cases to {args.export}")
    print(_report(outcomes, skips, args.scope, args.skipped))
    return 0


def load_cases(path: Path) -> list[Case | api.ApiCase]:
    return [api.ApiCase(**c) if c.get("api") else Case(**c) for c in json.loads(path.read_text())]


if __name__ == "__main__":
    sys.exit(main())
