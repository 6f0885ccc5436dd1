"""statemachines/*.asl.json, generated from the readable sources in statemachines/src/.

What deploys, and what the local engine runs, is the JSON: template.yaml's
DefinitionUri names it, and onceflow/asl/batch_definition.py reads the processor's.
It is written from statemachines/src/<name>.asl.yaml, the same Amazon States
Language in YAML, where an expression can be laid out over lines and commented
and a piece that several expressions share is written once:

- Snippets. A source may start with a YAML document of named JSONata pieces
  (``Snippets: {name: text}``), then ``---`` and the definition. In an expression,
  ``{{name}}`` stands for the piece; a piece may use other pieces, and may be a
  list of strings joined with nothing between them (a long regular expression,
  a branch a line).
- Layout. An expression (a string from ``{%`` to ``%}``) written over several
  lines becomes one line: each line break, with the indentation and any
  ``/* comment */`` around it, becomes one space; other spacing is kept. A string,
  a quoted name or a regular expression never spans a line (refused), so no value
  changes; a long string goes on as a second literal of the same quote on the
  next line, and the two become one (two literals in a row are a syntax error
  to JSONata, so no expression it accepts changes meaning). JSONata reads
  whitespace and ``/* */`` comments between tokens as nothing (jsonata.js 2.0.6's
  tokenizer, ``next()``); tests/unit/test_jsonata_reference.py runs every
  expression as deployed against jsonata itself.
- DefinitionSubstitutions. ``"${Name}"`` (quoted) stays a string; a plain
  ``${Name}`` is written unquoted, as a number is (``"IntervalSeconds":
  ${RetryIntervalSeconds}``), and CloudFormation puts the parameter's value there.
- YAML anchors repeat whole values (a Retry, a Key); they are expanded.
- One source, two machines. ``processor.asl.yaml`` holds the per-message states of
  both the processor and the SQS batch workflow (onceflow/asl/batch_definition.py
  runs them for each message of a batch). Where the two differ, the value says so
  at that place: ``!machine {processor: A, batch: B}`` is A in the one and B in
  the other; a machine it does not name leaves the key (a state, a field) out.
  Each such difference is named in docs/design.md ("The SQS batch mode").

Why not deploy the YAML: CloudFormation takes "a JSON or YAML file" for
DefinitionS3Location (AWS::StepFunctions::StateMachine S3Location), but anchors
cannot share a piece of an expression, and neither how DefinitionSubstitutions
treat a YAML file (a plain ``${Name}`` that must become a number) nor whether
Step Functions keeps comments and line breaks inside ``{% %}`` is documented. So
the deployed JSON stays what it was, expression for expression, and only its
Comment says where it comes from.

The JSON is two-space indented, as batch_definition.py renders its own.

    python -m onceflow.asl.asl_source          # writes statemachines/*.asl.json
    python -m onceflow.asl.asl_source --check  # exit 1 if a file differs from its source
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout these tools write in
STATEMACHINES = PROJECT_ROOT / "statemachines"
SOURCES = STATEMACHINES / "src"
SOURCE_SUFFIX = ".asl.yaml"
# The sources: a reviewer reads these, so each line fits on a screen.
MAX_LINE = 120

_SNIPPET = re.compile(r"\{\{(\w+)\}\}")
_PLACEHOLDER = re.compile(r"^\$\{(\w+)\}$")
_MARK = "@@onceflow-substitution:{}@@"
_MARKED = re.compile(r'"@@onceflow-substitution:(\w+)@@"')
# jsonata.js reads a "/" as the start of a regular expression where an operand
# is due and as division after one; an operand ends with one of these.
_OPERAND_END = re.compile(r"[\w$)\]}'\"`]")
# What jsonata.js skips as whitespace between tokens (other spaces belong to a name).
_WHITESPACE = " \t\n\r\v"


class SourceError(Exception):
    """A source in statemachines/src/ is not one a definition can be generated from."""


# The machines a source may differ for (``!machine``): the single-message processor,
# and the per-message states of the SQS batch workflow.
MACHINES = ("processor", "batch")


@dataclass(frozen=True)
class PerMachine:
    """A ``!machine {processor: A, batch: B}`` value: what it is in each machine."""

    values: dict[str, Any]


_ABSENT = object()  # a !machine value for a machine it does not name


@dataclass(frozen=True)
class Substitution:
    """A plain ``${Name}`` of the source: a DefinitionSubstitution written unquoted."""

    name: str


class _Loader(yaml.SafeLoader):
    """YAML as the sources use it, where a plain ``${Name}`` is a Substitution."""


def _substitution(loader: yaml.SafeLoader, node: yaml.Node) -> Substitution:
    value = loader.construct_scalar(node)  # type: ignore[arg-type]
    match = _PLACEHOLDER.match(str(value))
    if match is None:  # not reached: the resolver matched the same pattern
        raise SourceError(f"not a substitution: {value!r}")
    return Substitution(match.group(1))


def _per_machine(loader: yaml.SafeLoader, node: yaml.Node) -> PerMachine:
    if not isinstance(node, yaml.MappingNode):
        raise SourceError(f"!machine takes a mapping by machine ({MACHINES}): {node.start_mark}")
    values = {str(k): v for k, v in loader.construct_mapping(node, deep=True).items()}
    unknown = set(values) - set(MACHINES)
    if unknown or not values:
        raise SourceError(f"!machine names {sorted(unknown) or 'nothing'}: {node.start_mark}")
    return PerMachine(values)


# An implicit resolver applies to plain scalars only: a quoted "${Name}" stays a string.
_Loader.add_implicit_resolver("!substitution", _PLACEHOLDER, ["$"])
_Loader.add_constructor("!substitution", _substitution)
_Loader.add_constructor("!machine", _per_machine)


# ---- one line of JSONata from a laid-out one ---------------------------------------


def _closing(text: str, start: int, what: str) -> int:
    """The index after the literal that opens at start (a quote or a backtick)."""
    quote = text[start]
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == "\\" and quote != "`":
            position += 2
            continue
        if char == "\n":
            raise SourceError(f"a line break inside a {what}: {text[start : position + 1]!r}")
        if char == quote:
            return position + 1
        position += 1
    raise SourceError(f"a {what} that does not end: {text[start:]!r}")


def _regex_end(text: str, start: int) -> int:
    """The index after the regular expression whose "/" is at start, as jsonata.js
    scans it (the closing "/" is unescaped and outside brackets), flags included."""
    depth = 0
    position = start + 1
    while position < len(text):
        char = text[position]
        escaped = text[position - 1] == "\\"
        if char == "\n":
            raise SourceError(f"a line break inside a regular expression: {text[start:position]!r}")
        if char == "/" and depth == 0:
            backslashes = len(text[:position]) - len(text[:position].rstrip("\\"))
            if backslashes % 2 == 0:
                position += 1
                while position < len(text) and text[position] in "im":
                    position += 1
                return position
        if char in "([{" and not escaped:
            depth += 1
        elif char in ")]}" and not escaped:
            depth -= 1
        position += 1
    raise SourceError(f"a regular expression that does not end: {text[start:]!r}")


def _gap_end(text: str, position: int) -> tuple[int, bool]:
    """The end of the whitespace and comments from position on, and whether they break
    the line (hold a line break or a comment)."""
    end, breaks = position, False
    while end < len(text):
        if text[end] in _WHITESPACE:
            breaks = breaks or text[end] == "\n"
            end += 1
        elif text.startswith("/*", end):
            close = text.find("*/", end + 2)
            if close < 0:
                raise SourceError(f"a comment that does not end: {text[end:]!r}")
            end, breaks = close + 2, True
        else:
            break
    return end, breaks


def _string(text: str, start: int) -> tuple[str, int]:
    """The string literal at start, and the index after it. Literals of one quote that
    follow each other across a line break are one literal (JSONata itself refuses two
    literals in a row, so this changes no expression that it accepts)."""
    quote = text[start]
    end = _closing(text, start, "string")
    literal = text[start:end]
    while True:
        after, _ = _gap_end(text, end)
        if after >= len(text) or text[after] != quote or "\n" not in text[end:after]:
            return literal, end
        following = _closing(text, after, "string")
        literal = literal[:-1] + text[after + 1 : following]
        end = following


def compact(text: str) -> str:
    """The expression on one line: each run of whitespace that holds a line break or a
    comment becomes one space; strings, names and regular expressions are kept as they are."""
    out: list[str] = []
    last = ""  # the last character of code written, to tell a regex from a division
    position = 0
    while position < len(text):
        char = text[position]
        if char in _WHITESPACE or text.startswith("/*", position):
            end, breaks = _gap_end(text, position)
            out.append(" " if breaks else text[position:end])
            position = end
            continue
        if char in "'\"":
            piece, end = _string(text, position)
        else:
            if char == "`":
                end = _closing(text, position, "quoted name")
            elif char == "/" and not _OPERAND_END.match(last):
                end = _regex_end(text, position)
            else:
                end = position + 1
            piece = text[position:end]
        out.append(piece)
        last = piece[-1]
        position = end
    return "".join(out)


def is_expression(value: str) -> bool:
    """A JSONata expression of a definition, as Step Functions recognizes one."""
    return value.startswith("{%") and value.endswith("%}")


# ---- the source ------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One source: its snippets (one line each, expanded) and its definition as written."""

    path: Path
    snippets: dict[str, str]
    definition: dict[str, Any]
    raw_snippets: Any = None  # the first document as written: snippets by machine

    @property
    def target(self) -> Path:
        """The .asl.json it generates: statemachines/src/x.asl.yaml -> statemachines/x.asl.json."""
        return self.path.parent.parent / (self.path.name.removesuffix(SOURCE_SUFFIX) + ".asl.json")


def _expand(text: str, snippets: dict[str, str], where: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in snippets:
            raise SourceError(f"{where}: no snippet {{{{{name}}}}}")
        return snippets[name]

    return _SNIPPET.sub(one, text)


def _snippet_text(value: Any, where: str) -> str:
    """A snippet's text: a string, or a list of strings joined with nothing between them
    (a regular expression written a branch per line)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)
    raise SourceError(f"{where}: a snippet is a string or a list of strings")


def _for_machine(value: Any, machine: str) -> Any:
    """A snippet as one machine has it: a ``!machine`` snippet's value for that machine."""
    if isinstance(value, PerMachine):
        return value.values.get(machine, "")
    return value


def _snippets(raw: Any, path: Path, machine: str = "processor") -> dict[str, str]:
    """Each snippet on one line, the snippets it names put in (defined in any order), as
    the machine has it (a snippet may be ``!machine {processor: A, batch: B}``)."""
    if not (
        isinstance(raw, dict) and set(raw) == {"Snippets"} and isinstance(raw["Snippets"], dict)
    ):
        raise SourceError(f"{path.name}: the first of two documents is `Snippets: {{name: text}}`")
    texts = {
        str(k): _snippet_text(_for_machine(v, machine), f"{path.name}: {k}")
        for k, v in raw["Snippets"].items()
    }
    done: dict[str, str] = {}

    def resolve(name: str, seen: tuple[str, ...]) -> str:
        if name in seen:
            raise SourceError(
                f"{path.name}: snippets include each other: {' -> '.join((*seen, name))}"
            )
        if name not in texts:
            raise SourceError(f"{path.name}: {seen[-1]} names no snippet {{{{{name}}}}}")
        if name not in done:
            text = _SNIPPET.sub(lambda m: resolve(m.group(1), (*seen, name)), texts[name])
            done[name] = compact(text).strip()
        return done[name]

    for name in texts:
        resolve(name, ())
    return done


def load(path: Path) -> Source:
    """A source file, parsed: its snippets and its definition."""
    documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_Loader))
    if len(documents) == 2:
        snippets, definition = _snippets(documents[0], path), documents[1]
    elif len(documents) == 1:
        snippets, definition = {}, documents[0]
    else:
        raise SourceError(f"{path.name}: one document (the definition) or two (snippets first)")
    if not isinstance(definition, dict) or "States" not in definition:
        raise SourceError(f"{path.name}: the definition is a mapping with States")
    raw = documents[0] if len(documents) == 2 else None
    return Source(path=path, snippets=snippets, definition=definition, raw_snippets=raw)


def _generated(node: Any, snippets: dict[str, str], where: str, machine: str) -> Any:
    if isinstance(node, PerMachine):
        if machine not in node.values:
            return _ABSENT
        return _generated(node.values[machine], snippets, where, machine)
    if isinstance(node, dict):
        items = {str(k): _generated(v, snippets, f"{where}.{k}", machine) for k, v in node.items()}
        return {k: v for k, v in items.items() if v is not _ABSENT}
    if isinstance(node, list):
        values = [_generated(v, snippets, f"{where}[{n}]", machine) for n, v in enumerate(node)]
        return [v for v in values if v is not _ABSENT]
    if isinstance(node, Substitution):
        return _MARK.format(node.name)
    if isinstance(node, str) and is_expression(node.strip()):
        return compact(_expand(node.strip(), snippets, where))
    if isinstance(node, str) and _SNIPPET.search(node):
        raise SourceError(f"{where}: {{{{name}}}} is for expressions ({{% ... %}}) only")
    return node


def generate(source: Source, machine: str = MACHINES[0]) -> dict[str, Any]:
    """The definition that deploys (``${Name}`` markers where the JSON has them unquoted),
    its Comment saying where it comes from: as the processor runs it, or (machine
    "batch") the per-message states as the batch workflow runs them."""
    if machine not in MACHINES:
        raise SourceError(f"no machine {machine!r}: {', '.join(MACHINES)}")
    snippets = (
        source.snippets
        if source.raw_snippets is None
        else _snippets(source.raw_snippets, source.path, machine)
    )
    generated: dict[str, Any] = _generated(source.definition, snippets, source.path.name, machine)
    origin = (
        f"GENERATED from statemachines/src/{source.path.name} by onceflow/asl/asl_source.py: "
        "do not edit."
    )
    comment = generated.pop("Comment", None)
    return {"Comment": f"{origin} {comment}" if comment else origin, **generated}


def render(source: Source) -> str:
    """The text of the .asl.json file."""
    text = json.dumps(generate(source), indent=2, ensure_ascii=False) + "\n"
    return _MARKED.sub(lambda m: "${" + m.group(1) + "}", text)


def sources(directory: Path | None = None) -> list[Source]:
    """Every source in directory (statemachines/src/), by name."""
    return [load(path) for path in sorted((directory or SOURCES).glob("*" + SOURCE_SUFFIX))]


def long_lines(path: Path, limit: int = MAX_LINE) -> list[tuple[int, int]]:
    """(line number, length) of each line of a source longer than limit."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(number, len(line)) for number, line in enumerate(lines, start=1) if len(line) > limit]


def _shown(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onceflow.asl.asl_source",
        description="Write statemachines/*.asl.json from their sources in statemachines/src/.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file differs"
    )
    args = parser.parse_args(argv)
    stale = []
    for source in sources():
        text = render(source)
        current = source.target.read_text(encoding="utf-8") if source.target.exists() else None
        if current == text:
            print(f"{_shown(source.target)} is up to date")
        elif args.check:
            stale.append(source)
        else:
            source.target.write_text(text, encoding="utf-8")
            print(f"wrote {_shown(source.target)}")
    for source in stale:
        print(
            f"{_shown(source.target)} is not what {_shown(source.path)} generates; "
            "run: python -m onceflow.asl.asl_source",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
