"""LocalStack's snapshot transformers, ported: what an AWS recording was written through.

A LocalStack snapshot file does not hold what AWS answered but what its snapshot session
made of it: the answers' JSON text read as values, then every transformer the test and its
fixtures registered, in their order (ARNs, names, ids and timestamps become placeholders).
To compare a local run with a recording, the local answers go through the same transformers,
built from the local run's own names and ARNs; the recording is left as it is. A placeholder
on AWS's side then matches only what the local value at that place is replaced by.

Ported from (Apache-2.0): github.com/localstack/localstack-snapshot 0.4.0
(`localstack_snapshot/snapshots/transformer.py`, `prototype.py` SnapshotSession._transform),
and github.com/localstack/localstack (`tests/aws/conftest.py` the `snapshot` fixture,
`localstack-core/localstack/testing/snapshots/transformer_utility.py` TransformerUtility
and SNAPSHOT_BASIC_TRANSFORMER, `localstack-core/localstack/testing/pytest/stepfunctions/`
`fixtures.py` sfn_snapshot and `utils.py` create_state_machine_with_iam_role,
launch_and_record_execution, SfnNoneRecursiveParallelTransformer).

Each transformer is a `Spec` (plain data, so a fixed selection stores it as JSON). Two
kinds stand for a value known only once the local run is done, as in LocalStack's helpers:
`execution_arn` (sfn_sm_exec_arn of the started execution) and `map_run_arns`
(launch_and_record_execution's sfn_map_run_arn for each mapRunArn of the history).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from jsonpath_ng.ext.parser import parse

from onceflow.local.provisioning import ACCOUNT_ID, REGION

# localstack_snapshot.snapshots.transformer.PATTERN_ISO8601
PATTERN_ISO8601 = re.compile(
    r"(?:[1-9]\d{3}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|"
    r"(?:0[13578]|1[02])-31)|(?:[1-9]\d(?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|"
    r"[13579][26])00)-02-29)T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-][01]\d:?"
    r"([0-5]\d)?)"
)
# localstack.testing.snapshots.transformer_utility.PATTERN_UUID / PATTERN_ARN
PATTERN_UUID = re.compile(
    r"[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{12}"
)
PATTERN_ARN = re.compile(r"arn:(aws[a-zA-Z-]*)?:([a-zA-Z0-9-_.]+)?:([^:]+)?:(\d{12})?:(.*)")
_TIMESTAMP_KEY = re.compile(r"^.*timestamp.*$", flags=re.IGNORECASE)


class Unsupported(Exception):
    """A transformer the replay cannot reproduce (one built on a test's own function)."""


@dataclass(frozen=True)
class Spec:
    """One registered transformer.

    kind: regex (a pattern, b replacement, flags) | text | jsonpath (a path, b replacement,
    reference) | key_value (a key, b replacement, reference) | match (a: a named match
    function of MATCHES, b replacement, reference) | remove_key (a key) | json_string (a key)
    | response_metadata | parallel | sort_variable_references | execution_arn (index) |
    map_run_arns | generic (a: the
    source of a function the test defines, b: its name).
    """

    kind: str
    a: str = ""
    b: str = ""
    reference: bool = True
    index: int = 0
    flags: int = 0
    priority: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v != getattr(_BLANK, k)}

    @staticmethod
    def from_json(value: dict[str, Any]) -> Spec:
        return Spec(**value)


_BLANK = Spec("")


@dataclass
class Run:
    """What only the local run knows: its execution's ARN and the history's map run ARNs
    (read before any transformer, as launch_and_record_execution reads them)."""

    execution_arn: str
    map_run_arns: list[str]


# ---- the reference replacements (transformer.py) ----------------------------------------


class Context:
    """TransformContext: replacements applied to each answer's JSON text, in their order,
    and the numbering of reference placeholders (<replacement:1>, <replacement:2>, ...)."""

    def __init__(self) -> None:
        self.replacements: list[Callable[[str], str]] = []
        self.scoped: dict[str, int] = {}
        self.seen: set[str] = set()

    def reference(self, value: Any, replacement: str) -> None:
        """_register_serialized_reference_replacement."""
        if not isinstance(value, str):
            raise TypeError(
                f"the reference value {value!r} is not a string (LocalStack's transformer "
                f"for {replacement} refuses it too)"
            )
        if not value:
            # LocalStack's would put the placeholder between every two characters of the
            # answer (an unreadable snapshot); left as it is, the empty value shows at its
            # field against AWS's placeholder.
            return
        value = value.replace('"', '\\"')
        if value in self.seen:
            return
        self.seen.add(value)
        number = self.scoped.setdefault(replacement, 1)
        self.scoped[replacement] += 1
        placeholder = f"<{replacement}:{number}>"
        self.replacements.append(lambda text: text.replace(value, placeholder))

    def regex(self, pattern: re.Pattern[str], replacement: str) -> None:
        self.replacements.append(lambda text: pattern.sub(replacement, text))


# ---- the match functions of LocalStack's KeyValueBasedTransformers ----------------------


def _uuid_id(key: str, value: Any) -> Any:
    # SNAPSHOT_BASIC_TRANSFORMER: ids that are UUIDs
    matched = isinstance(value, str) and key.lower().endswith("id") and PATTERN_UUID.match(value)
    return value if matched else None


def _datetime(key: str, value: Any) -> Any:
    return value if isinstance(value, datetime.datetime) else None


def _timestamp_key(key: str, value: Any) -> Any:
    timed = _TIMESTAMP_KEY.match(key) or key in ("creationTime", "ingestionTime")
    return str(value) if timed and not PATTERN_ISO8601.match(str(value)) else None


def _cause_json(key: str, value: Any) -> Any:
    # stepfunctions_api: _transform_stepfunctions_cause_details
    if key == "cause" and isinstance(value, str):
        found = re.match(r".*'({.*})'", value)
        if found:
            try:
                json.loads(found.group(1))
            except ValueError:
                return None
            return found.group(1)
    return None


def _resource_name(key: str, value: Any) -> Any:
    # transformer_utility._resource_name_transformer
    if not isinstance(value, str):
        return None
    found = PATTERN_ARN.match(value)
    if not found:
        return None
    res = found.groups()[-1]
    if res.startswith("<") and res.endswith(">"):
        return None
    if ":changeSet/" in value:
        return value.split(":changeSet/")[-1]
    if "/" in res:
        return res.split("/")[-1]
    if res.startswith("function:"):
        res = res.replace("function:", "")
        if "$" in res:
            res = res.split("$")[0].rstrip(":")
        return res
    if res.startswith("layer:"):
        parts = res.split(":")
        return parts[1] if len(parts) in (2, 3) else None
    if ":" in res:
        return res.split(":")[-1]
    return res


MATCHES: dict[str, Callable[[str, Any], Any]] = {
    "uuid_id": _uuid_id,
    "datetime": _datetime,
    "timestamp_key": _timestamp_key,
    "cause_json": _cause_json,
    "resource_name": _resource_name,
}


def _key_match(key: str) -> Callable[[str, Any], Any]:
    # TransformerUtility.key_value
    return lambda k, v: v if k == key and v is not None and v != "" else None


def _key_value(
    data: Any, match: Callable[[str, Any], Any], replacement: str, reference: bool, ctx: Context
) -> Any:
    """KeyValueBasedTransformer.transform."""
    for key, value in data.items():
        found = match(key, value)
        if found is not None:
            if reference:
                ctx.reference(found, replacement)
            elif isinstance(value, str):
                data[key] = value.replace(found, replacement)
            else:
                data[key] = replacement
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    value[index] = _key_value(item, match, replacement, reference, ctx)
        elif isinstance(value, dict):
            data[key] = _key_value(value, match, replacement, reference, ctx)
    return data


# ---- each kind -------------------------------------------------------------------------


def _response_metadata(data: dict[str, Any]) -> dict[str, Any]:
    for key, value in data.items():
        if key == "ResponseMetadata" and isinstance(value, dict):
            headers = value.get("HTTPHeaders")
            if not isinstance(headers, dict):
                continue
            simplified: dict[str, Any] = {
                "HTTPHeaders": {h: headers[h] for h in ("content_type",) if headers.get(h)}
            }
            if status := value.get("HTTPStatusCode"):
                simplified["HTTPStatusCode"] = status
            data[key] = simplified
        elif isinstance(value, dict):
            data[key] = _response_metadata(value)
    return data


def _without(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        return {k: _without(v, key) for k, v in data.items() if k != key}
    if isinstance(data, list):
        return [_without(v, key) for v in data]
    return data


def _json_strings(data: Any, key: str) -> Any:
    """JsonStringTransformer."""

    def nested(value: Any) -> Any:
        if isinstance(value, list):
            value = [nested(v) for v in value]
        if isinstance(value, dict):
            value = {k: nested(v) for k, v in value.items()}
        if isinstance(value, str) and value.strip().startswith(("{", "[")):
            with contextlib.suppress(ValueError):  # not JSON: it stays text, as LocalStack's
                value = nested(json.loads(value))
        return value

    if isinstance(data, dict):
        for k, v in data.items():
            if k == key and isinstance(v, str) and v.strip().startswith(("{", "[")):
                with contextlib.suppress(ValueError):  # not JSON: it stays text
                    data[k] = nested(json.loads(v))
            else:
                data[k] = _json_strings(v, key)
        return data
    if isinstance(data, list):
        return [_json_strings(v, key) for v in data]
    return data


_PARALLEL_END = {
    "ParallelStateSucceeded",
    "ParallelStateAborted",
    "ParallelStateExited",
    "ParallelStateFailed",
}


def unorder_parallel(events: list[dict[str, Any]]) -> None:
    """SfnNoneRecursiveParallelTransformer._normalise_events, in place: the events inside a
    Parallel state get id (0,) and previousEventId 0 and are sorted (their order varies by
    run), the sublist spliced in again at each closing event as LocalStack's does."""
    start, inside = 0, False
    sublist: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        kind = event.get("type")
        if kind is None:
            inside = False
        elif kind in _PARALLEL_END:
            events[start:index] = sorted(sublist, key=lambda e: json.dumps(e, default=str))
            inside = False
        elif kind == "ParallelStateStarted":
            inside, sublist, start = True, [], index + 1
        elif inside:
            event["id"], event["previousEventId"] = (0,), 0
            sublist.append(event)


def _apply(spec: Spec, data: dict[str, Any], ctx: Context, run: Run) -> dict[str, Any]:
    kind = spec.kind
    if kind == "regex":
        ctx.regex(re.compile(spec.a, spec.flags), spec.b)
    elif kind == "text":
        ctx.replacements.append(lambda text: text.replace(spec.a, spec.b))
    elif kind == "jsonpath":
        path = parse(spec.a)
        if spec.reference:
            for found in path.find(data):
                ctx.reference(found.value, spec.b)
        else:
            path.update(data, spec.b)
    elif kind == "key_value":
        data = _key_value(data, _key_match(spec.a), spec.b, spec.reference, ctx)
    elif kind == "match":
        data = _key_value(data, MATCHES[spec.a], spec.b, spec.reference, ctx)
    elif kind == "remove_key":
        data = {k: _without(v, spec.a) for k, v in data.items()}
    elif kind == "json_string":
        data = _json_strings(data, spec.a)
    elif kind == "response_metadata":
        data = _response_metadata(data)
    elif kind == "generic":
        # GenericTransformer(fn) with fn the test's own function (its source, a; its name, b)
        namespace: dict[str, Any] = {"json": json, "re": re}
        exec(compile(spec.a, "<the recording's transformer>", "exec"), namespace)
        data = namespace[spec.b](data, ctx)
    elif kind == "sort_variable_references":
        # test_sfn_api_variable_references' _SfnSortVariableReferences: each list sorted
        for found in parse("$..variableReferences").find(data):
            for names in found.value.values():
                names.sort()
    elif kind == "parallel":
        for found in parse("$..events").find(data):
            unorder_parallel(found.value)
    elif kind == "execution_arn":
        # sfn_sm_exec_arn: the ARN's last part
        ctx.regex(
            re.compile(run.execution_arn.rpartition(":")[-1]), f"<ExecArnPart_{spec.index}idx>"
        )
    elif kind == "map_run_arns":
        for index, arn in enumerate(run.map_run_arns):
            for regex_spec in sfn_map_run_arn(arn, index):
                ctx.regex(re.compile(regex_spec.a), regex_spec.b)
    else:
        raise Unsupported(f"no transformer of kind {kind!r}")
    return data


def _parseable(data: dict[str, Any]) -> None:
    """SnapshotSession._transform_dict_to_parseable_values: a string that starts with "{"
    is read as JSON (not "[": LocalStack's does not)."""
    for key, value in data.items():
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _parseable(item)
        if isinstance(value, dict):
            _parseable(value)
        if isinstance(value, str) and value.startswith("{"):
            with contextlib.suppress(ValueError):  # not JSON: it stays text, as LocalStack's
                data[key] = json.loads(value)


def transform(observed: dict[str, Any], specs: list[Spec], run: Run) -> dict[str, Any]:
    """SnapshotSession._transform: what the snapshot file would hold for these answers."""
    data = copy.deepcopy(observed)
    _parseable(data)
    ctx = Context()
    for spec in sorted(specs, key=lambda s: s.priority):  # stable, as LocalStack's sort
        data = _apply(spec, data, ctx, run)
    out: dict[str, Any] = {}
    for key, value in data.items():
        text = json.dumps(value, default=str)
        for replace in ctx.replacements:
            text = replace(text)
        out[key] = json.loads(text)
    return out


# ---- what the fixtures register --------------------------------------------------------


def regex(pattern: str | re.Pattern[str], replacement: str, priority: int = 0) -> Spec:
    if isinstance(pattern, re.Pattern):
        return Spec("regex", pattern.pattern, replacement, flags=pattern.flags, priority=priority)
    return Spec("regex", pattern, replacement, priority=priority)


def key_value(key: str, replacement: str | None = None, reference: bool = True) -> Spec:
    hyphened = "".join("-" + c.lower() if c.isupper() else c for c in key).strip("-")
    return Spec("key_value", key, replacement or hyphened, reference)


def stepfunctions_api(recorded: datetime.date | None = None) -> list[Spec]:
    """TransformerUtility.stepfunctions_api (the sfn_snapshot fixture's) as it was when the
    recording was written: LocalStack's commit 35cd175c4 (2025-02-10) replaced its first
    list (Date and X-Amzn-Trace-Id of SdkHttpMetadata's two header maps), commit 42ed9a17f
    (merged 2025-11-28, PR #13418) added x-amzn-requestid, and the recordings it rewrote with
    it are dated from 2025-11-06 (its DynamoDB getItem ones); a recording keeps what the list
    of its day made."""
    if recorded is not None and recorded < datetime.date(2025, 2, 10):
        paths = [
            ("$..SdkHttpMetadata.AllHttpHeaders.Date", "date"),
            ("$..SdkHttpMetadata.AllHttpHeaders.X-Amzn-Trace-Id", "X-Amzn-Trace-Id"),
            ("$..SdkHttpMetadata.HttpHeaders.Date", "date"),
            ("$..SdkHttpMetadata.HttpHeaders.X-Amzn-Trace-Id", "X-Amzn-Trace-Id"),
        ]
    else:
        paths = [
            ("$..SdkHttpMetadata..Date", "date"),
            ("$..SdkResponseMetadata..RequestId", "RequestId"),
            ("$..X-Amzn-Trace-Id", "X-Amzn-Trace-Id"),
            ("$..X-Amzn-Trace-Id", "X-Amzn-Trace-Id"),
            ("$..x-amz-crc32", "x-amz-crc32"),
            ("$..x-amzn-RequestId", "x-amzn-RequestId"),
        ]
        if recorded is None or recorded >= datetime.date(2025, 11, 6):
            paths.append(("$..x-amzn-requestid", "x-amzn-requestid"))
    return [Spec("jsonpath", p, r, reference=False) for p, r in paths] + [
        Spec("match", "cause_json", "json-input")
    ]


def recorded_on(text: str) -> datetime.date | None:
    """A snapshot entry's "recorded-date" ("11-09-2024, 12:48:08": day first)."""
    try:
        return datetime.datetime.strptime(text, "%d-%m-%Y, %H:%M:%S").date()
    except (TypeError, ValueError):
        return None


def fixtures(stepfunctions: bool = True, recorded: datetime.date | None = None) -> list[Spec]:
    """What the `snapshot` fixture (tests/aws/conftest.py, for the exempted stepfunctions
    folder: SNAPSHOT_BASIC_TRANSFORMER) and then `sfn_snapshot` register, for this engine's
    account and region."""
    basic = [
        Spec("response_metadata", priority=2),
        Spec("match", "uuid_id", "uuid", priority=2),
        regex(PATTERN_ISO8601, "date", priority=2),
        Spec("match", "datetime", "datetime", reference=False, priority=2),
        Spec("match", "timestamp_key", "timestamp", reference=False, priority=2),
    ]
    return [
        regex(ACCOUNT_ID, "1" * 12, priority=2),
        regex(REGION, "<region>", priority=2),
        regex("arn:aws:", "arn:<partition>:", priority=2),
        Spec("remove_key", "x-localstack"),
        *basic,
        *(stepfunctions_api(recorded) if stepfunctions else []),
    ]


def create_state_machine_with_iam_role(
    role_arn: str, machine_name: str, index: int = 0
) -> list[Spec]:
    """What utils.create_state_machine_with_iam_role registers (then sfn_sm_create_arn)."""
    return [
        regex(role_arn, "snf_role_arn"),
        regex(
            "Extended Request ID: [a-zA-Z0-9-/=+]+", "Extended Request ID: <extended_request_id>"
        ),
        regex("Request ID: [a-zA-Z0-9-]+", "Request ID: <request_id>"),
        sfn_sm_create_arn(machine_name, index),
    ]


def sfn_sm_create_arn(machine_arn_or_name: str, index: int) -> Spec:
    return regex(machine_arn_or_name.rpartition(":")[-1], f"<ArnPart_{index}idx>")


def launch_and_record_execution() -> list[Spec]:
    """What utils.launch_and_record_execution registers: the execution's ARN, then each map
    run's, read from the history."""
    return [Spec("execution_arn", index=0), Spec("map_run_arns")]


def sfn_map_run_arn(map_run_arn: str, index: int) -> list[Spec]:
    parts = map_run_arn.split("/")[-1].split(":")
    found = [regex(parts[1], f"<MapRunArnPart1_{index}idx>")]
    if PATTERN_UUID.match(parts[0]):
        found.append(regex(parts[0], f"<MapRunArnPart0_{index}idx>"))
    return found


def map_run_arns(history: Any) -> list[str]:
    """The history's mapRunArns, each once, in the order they first appear (LocalStack takes
    list(set(...)): with two or more the numbering is arbitrary there)."""
    found: list[str] = []
    for match in parse("$..mapRunArn").find(history):
        if isinstance(match.value, str) and match.value not in found:
            found.append(match.value)
    return found
