"""Read template.yaml as CloudFormation would: parameters, conditions, intrinsics, SAM Globals."""

from __future__ import annotations

import copy
import hashlib
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NO_VALUE = object()  # AWS::NoValue: the property disappears


class TemplateError(Exception):
    """The template uses something the local engine cannot resolve."""


class RulesRefused(TemplateError):
    """The template's Rules refused these parameters: every failed assertion as (the rule's
    logical id, its AssertDescription), so that one attempt shows everything to change."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.failures = failures
        lines = [f"rule {name}: {description}" for name, description in failures]
        head = [f"{len(lines)} rule assertions failed:"] if len(lines) > 1 else []
        super().__init__("\n  ".join(head + lines))


# libyaml's parser when PyYAML has it (the wheels carry it): the same documents, 9x faster
# on template.yaml, which every engine start reads (local-engine.md, speed-ups: +40%).
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CfnLoader(_SAFE_LOADER):  # type: ignore[misc]
    """YAML loader that turns short-form tags into their long form: !Ref X is {"Ref": X} and
    any other !Tag is Fn::Tag, as aws-cli's yamlhelper (samtranslator/yaml_helper.py) reads it."""


def _construct(loader: Any, tag: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        value = str(value).split(".", 1) if tag == "GetAtt" else value
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    # !Condition X is {"Condition": X} (intrinsic-function-reference-conditions.html, Fn::And)
    return {tag if tag in ("Ref", "Condition") else f"Fn::{tag}": value}


_CfnLoader.add_multi_constructor("!", _construct)


# Each template read once per process, by its bytes: a test run starts hundreds of engines
# on the same template.yaml (12.7 ms of CPU a parse, 0.6 ms a pickled copy). Each caller
# gets its own copy, as from a parse of its own (callers change theirs: with_constants).
_PARSED: dict[bytes, bytes] = {}
_PARSED_KEPT = 16


def load_template(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
        parsed = _PARSED.get(raw)
        if parsed is not None:
            return pickle.loads(parsed)  # type: ignore[no-any-return]  # noqa: S301 - our own pickle of a parse
        document = yaml.load(raw.decode("utf-8"), Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    except OSError as exc:
        raise TemplateError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.MarkedYAMLError as exc:  # one line: where, then what
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = " ".join(str(x) for x in (exc.problem, exc.context) if x)
        raise TemplateError(f"{path} is not YAML or JSON: {where}{what}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path} is not YAML or JSON: {exc}") from exc
    if not isinstance(document, dict) or "Resources" not in document:
        raise TemplateError(f"{path} is not a CloudFormation template")
    if len(_PARSED) < _PARSED_KEPT:
        _PARSED[raw] = pickle.dumps(document, protocol=pickle.HIGHEST_PROTOCOL)
    return document


_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def coerce_parameter(name: str, spec: Mapping[str, Any], value: Any) -> str:
    """A parameter's value as text, refused where CloudFormation refuses it at deploy."""
    text = str(value)
    allowed = spec.get("AllowedValues")
    if allowed is not None and text not in [str(a) for a in allowed]:
        raise TemplateError(
            f"parameter {name}={text!r} is not one of {', '.join(str(a) for a in allowed)}"
        )
    pattern = spec.get("AllowedPattern")
    # CloudFormation applies AllowedPattern to the whole value (String types only).
    if pattern is not None and spec.get("Type") == "String" and not re.fullmatch(pattern, text):
        rule = spec.get("ConstraintDescription") or f"must match the pattern {pattern}"
        raise TemplateError(f"parameter {name}={text!r} failed its constraint: {rule}")
    if spec.get("Type") == "Number":
        # Plain decimal notation only: Python's float() also reads "inf", "nan" and "1_0".
        if not _NUMBER.fullmatch(text):
            raise TemplateError(f"parameter {name}={text!r} must be a number")
        number = float(text)
        if "MinValue" in spec and number < float(spec["MinValue"]):
            raise TemplateError(f"parameter {name}={text!r} is below {spec['MinValue']}")
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            raise TemplateError(f"parameter {name}={text!r} is above {spec['MaxValue']}")
    return text


@dataclass
class Stack:
    """A template with its parameters bound; resolves intrinsics against physical ids."""

    template: dict[str, Any]
    root: Path
    region: str = "us-east-1"
    account_id: str = "123456789012"
    stack_name: str = "onceflow-local"
    parameters: dict[str, str] = field(default_factory=dict)
    # Filled by the engine as it creates resources: Ref value and attributes.
    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    create: Callable[[str], None] | None = None

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, Any] | None = None, **at: Any) -> Stack:
        """The template at path, bound; at: region, account_id, stack_name."""
        stack = cls(load_template(path), path.parent, **at)
        stack.bind(overrides)
        return stack

    def bind(self, overrides: Mapping[str, Any] | None = None) -> None:
        """Give the parameters their values (an override, else the default), refused where
        CloudFormation refuses them at deploy."""
        specs: dict[str, Any] = self.template.get("Parameters", {})
        overrides = dict(overrides or {})
        unknown = set(overrides) - set(specs)
        if unknown:
            names = ", ".join(sorted(unknown))
            raise TemplateError(f"unknown parameters: {names}{self._nested_hint(unknown)}")
        for name, spec in specs.items():
            if name not in overrides and "Default" not in spec:
                raise TemplateError(f"parameter {name} has no default and no value")
        self.parameters = {
            name: coerce_parameter(name, spec, overrides.get(name, spec.get("Default")))
            for name, spec in specs.items()
        }
        self.check_rules()

    def _nested_hint(self, unknown: set[str]) -> str:
        """Where parameters of the application a parent nests are set: its Parameters (the
        overrides of sam deploy, and so these, reach the parent template only)."""
        try:
            nested = self.nested_application()
        except TemplateError:
            return ""  # refused with its own reason when the engine reads the application
        if nested is None or not unknown <= set(nested[1].template.get("Parameters") or {}):
            return ""
        return (
            f" (a parameter of the nested application {nested[0]}: set it under "
            f"{nested[0]}'s Parameters in this template)"
        )

    def nested_application(self) -> tuple[str, Stack] | None:
        """The template's AWS::Serverless::Application whose Location is a local template (a
        parent that nests onceflow): its logical id and its stack, bound once the resources
        its parameters name exist (docs/processor.md, "Test it locally")."""
        resources = self.template["Resources"]
        nested = [
            i for i, r in resources.items() if r.get("Type") == "AWS::Serverless::Application"
        ]
        if len(nested) > 1:
            raise TemplateError(
                f"{', '.join(nested)}: the local engine runs one nested application"
            )
        if not nested:
            return None
        location = resources[nested[0]].get("Properties", {}).get("Location")
        if not isinstance(location, str) or re.match(r"^[a-z][a-z0-9+.-]*://", location):
            raise TemplateError(
                f"{nested[0]}: Location {location!r} is not a local template; the local engine "
                "runs a nested application from a file path only"
            )
        path = self.root / location
        name = f"{self.stack_name}-{nested[0]}"
        return nested[0], Stack(
            load_template(path), path.parent, self.region, self.account_id, name
        )

    def check_rules(self) -> None:
        """Refuse the parameters as CloudFormation does: every assertion of every rule whose
        RuleCondition holds (no condition: always) must hold. Every failed assertion is
        listed, where a deploy may name fewer (the Rules pages do not say; docs/local-engine.md)."""
        failures: list[tuple[str, str]] = []
        for name, rule in self.template.get("Rules", {}).items():
            if "RuleCondition" in rule and not self.resolve(rule["RuleCondition"], rules=True):
                continue
            for assertion in rule.get("Assertions", []):
                if not self.resolve(assertion["Assert"], rules=True):
                    description = assertion.get("AssertDescription", "an assertion failed")
                    failures.append((name, " ".join(str(description).split())))
        if failures:
            raise RulesRefused(failures)

    def condition(self, name: str) -> bool:
        conditions = self.template.get("Conditions", {})
        if name not in conditions:
            raise TemplateError(f"unknown condition {name}")
        return bool(self.resolve(conditions[name]))

    def resource_enabled(self, logical_id: str) -> bool:
        name = self.template["Resources"][logical_id].get("Condition")
        return name is None or self.condition(name)

    def pseudo(self, name: str) -> str | None:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": (
                f"arn:aws:cloudformation:{self.region}:{self.account_id}"
                f":stack/{self.stack_name}/local"
            ),
        }.get(name)

    def physical_name(self, logical_id: str, limit: int = 63) -> str:
        """The name CloudFormation would give a resource the template leaves unnamed."""
        suffix = hashlib.sha256(f"{self.stack_name}/{logical_id}".encode()).hexdigest()[:8]
        return f"{f'{self.stack_name}-{logical_id}'.lower()[: limit - 9]}-{suffix}"

    def ref(self, name: str) -> str:
        if name in self.parameters:
            return self.parameters[name]
        pseudo = self.pseudo(name)
        if pseudo is not None:
            return pseudo
        self._ensure(name)
        return self.refs[name]

    def get_att(self, logical_id: str, attribute: str) -> str:
        self._ensure(logical_id)
        try:
            return self.attributes[logical_id][attribute]
        except KeyError:
            raise TemplateError(f"{logical_id}.{attribute} is not emulated") from None

    def _ensure(self, logical_id: str) -> None:
        if logical_id in self.refs:
            return
        if logical_id not in self.template["Resources"]:
            raise TemplateError(f"unresolvable reference {logical_id}")
        if self.create is None:
            raise TemplateError(f"{logical_id} is not created yet")
        self.create(logical_id)

    def _sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name:
                logical_id, attribute = name.split(".", 1)
                return self.get_att(logical_id, attribute)
            return self.ref(name)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def resolve(self, node: Any, *, rules: bool = False) -> Any:
        """Resolve every intrinsic in node; AWS::NoValue entries are dropped. Fn::Contains
        only in Rules ("rule functions ... work only in the Rules section",
        intrinsic-function-reference-rules.html)."""
        if isinstance(node, list):
            return [v for v in (self.resolve(i, rules=rules) for i in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            match key, arg:
                case "Ref", "AWS::NoValue":
                    return NO_VALUE
                case "Ref", _:
                    return self.ref(arg)
                case "Fn::GetAtt", [logical_id, attribute]:
                    return self.get_att(logical_id, attribute)
                case "Fn::GetAtt", str():
                    return self.get_att(*arg.split(".", 1))
                case "Fn::Sub", [text, variables]:
                    return self._sub(text, variables)
                case "Fn::Sub", str():
                    return self._sub(arg, {})
                case "Fn::If", [name, when_true, when_false]:
                    return self.resolve(when_true if self.condition(name) else when_false)
                case "Fn::Join", [delimiter, items]:
                    return str(delimiter).join(str(i) for i in self.resolve(items))
                case "Fn::Select", [index, items]:
                    return self.resolve(items)[int(self.resolve(index))]
                case "Fn::Split", [delimiter, text]:
                    return str(self.resolve(text)).split(delimiter)
                case "Fn::FindInMap", [*keys]:
                    return self.find_in_map(*(self.resolve(k) for k in keys))
                case "Fn::Equals", [left, right]:
                    return str(self.resolve(left)) == str(self.resolve(right))
                case "Fn::Not", [condition]:
                    return not self.resolve(condition, rules=rules)
                case "Fn::And", [*conditions]:
                    return all(self.resolve(c, rules=rules) for c in conditions)
                case "Fn::Or", [*conditions]:
                    return any(self.resolve(c, rules=rules) for c in conditions)
                case "Condition", str():
                    return self.condition(arg)
                case "Fn::Contains", [values, value] if rules:
                    return str(self.resolve(value)) in [str(v) for v in self.resolve(values)]
                case str(), _ if key.startswith("Fn::"):
                    raise TemplateError(f"{key} is not supported by the local engine")
        resolved = {k: self.resolve(v, rules=rules) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def find_in_map(self, map_name: str, top: str, second: str) -> Any:
        """Fn::FindInMap: the template's Mappings, two keys deep (intrinsic-function-
        reference-findinmap.html); a missing key fails the deploy, here at once."""
        try:
            return self.template["Mappings"][map_name][top][second]
        except (KeyError, TypeError):
            raise TemplateError(f"Fn::FindInMap: no {map_name}.{top}.{second}") from None

    def setting(self, name: str) -> str:
        """A parameter's value, or the constant that replaced a former parameter (the
        template's Mappings, Constants.Values; docs/operate.md, Constants)."""
        if name in self.parameters:
            return self.parameters[name]
        return str(self.find_in_map("Constants", "Values", name))

    def function_properties(self, logical_id: str) -> dict[str, Any]:
        """A Serverless::Function's properties with Globals merged in by SAM's own code
        (samtranslator's Globals; sam-specification-template-anatomy-globals.html)."""
        from samtranslator.plugins.globals.globals import Globals  # in the local extra

        resource = copy.deepcopy(self.template["Resources"][logical_id])
        # Globals reads the template's Globals section alone (its __init__): a copy of that
        # section, not of the whole template for every function (a tenth of a start's CPU)
        section = {k: copy.deepcopy(v) for k, v in self.template.items() if k == "Globals"}
        merged = Globals(section).merge(
            "AWS::Serverless::Function",
            resource.get("Properties", {}),
            logical_id,
            resource.get("IgnoreGlobals"),
        )
        return dict(self.resolve(merged))
