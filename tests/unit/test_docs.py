"""The README stays short, and every link, path and module the docs name exists.

A reader who was not here follows the README's links into docs/, copies the paths and the
`python -m` commands they give, and should never land on a file, a heading or a module that
has moved or gone. Links are checked as GitHub renders them: a relative link names a file,
and a `#anchor` the slug GitHub gives one of that file's headings.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from onceflow.cli.main import build_parser
from onceflow.local.template import load_template
from tests.hostile import corpus

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, *DOCS]
EXAMPLES = sorted((ROOT / "examples").glob("*/README.md"))
README_MAX_LINES = 250
TEMPLATE = ROOT / "template.yaml"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!!)\[(?:[^\]]*)\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A path of the repository written in backticks: no placeholder (<stack name>), no glob.
_REPO_PATH = re.compile(r"^(?:onceflow|functions|statemachines|events|tests)/[^\s<>{}*]*$")
_PYTHON_M = re.compile(r"\bpython -m ([A-Za-z_][\w.]*)")
_BENCH_START = "<!-- bench:start (a copy of bench/results.md, its headings one level down) -->"
_BENCH_END = "<!-- bench:end -->"


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a bash block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower case, punctuation dropped, '-' for ' '."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in "-_ ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's slug in a markdown file; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    result = set()
    for line in _prose(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = github_slug(match.group(2))
        result.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return result


def relative_links(path: Path) -> list[str]:
    """The targets of the links in a file's prose that stay inside the repository."""
    targets = []
    for line in _prose(path.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        for target in _LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                targets.append(target)
    return targets


def broken_links(path: Path) -> list[str]:
    """Each relative link of a file whose file, or whose heading, is not there."""
    problems = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no file {_name(linked)}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{target}: {_name(linked)} has no heading #{anchor}")
    return problems


def cited_paths(path: Path) -> list[str]:
    """The repository paths a file names in backticks (a pytest node id counts as its file)."""
    found = []
    for line in _prose(path.read_text(encoding="utf-8")):
        for span in _CODE_SPAN.findall(line):
            if _REPO_PATH.match(span):
                found.append(span.split("::")[0])
    return found


def python_modules(path: Path) -> list[str]:
    """The modules a file tells the reader to run with `python -m`, code blocks included."""
    return _PYTHON_M.findall(path.read_text(encoding="utf-8"))


def module_exists(name: str) -> bool:
    """Whether `python -m NAME` finds a module; a missing parent package means no."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # find_spec imports the parents, and one is not there
        return False


_TABLE_SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def stray_table_rows(path: Path) -> list[str]:
    """Table rows GitHub shows as text: glued to a paragraph, or a table with no `|---|` line.

    A row right under a line of prose is part of that paragraph, pipes and all; a table
    starts only after a blank line (or an HTML comment such as a generated block's marker)
    with its header and separator.
    """
    problems, previous = [], ""
    lines = _prose(path.read_text(encoding="utf-8"))
    for number, line in enumerate(lines):
        if line.startswith("|") and not previous.startswith("|"):
            following = lines[number + 1] if number + 1 < len(lines) else ""
            if previous.strip() and not previous.rstrip().endswith("-->"):
                problems.append(f"under a line of prose: {line[:60]}")
            elif not _TABLE_SEPARATOR.match(following):
                problems.append(f"a table without a separator line: {line[:60]}")
        previous = line
    return problems


def parameter_rows(path: Path, heading: str) -> dict[str, str]:
    """The first table under ``heading`` of a page: each parameter it names in its first
    cell (one row may name several, `A`, `B`) -> its default as the second cell gives it."""
    lines = _prose(path.read_text(encoding="utf-8"))
    start = lines.index(heading)
    rows: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0]) if line.startswith("|") else []
        defaults = [d.strip() for d in cells[1].split(",")] if len(cells) > 1 else []
        if names and len(defaults) != len(names):
            defaults = [cells[1]] * len(names)  # one default for all of them
        rows.update(zip(names, defaults, strict=False))
    return rows


def documented_default(value: object) -> str:
    """A template default as the parameter tables write it: an empty one is "empty"."""
    return "empty" if value in ("", None) else str(value)


_TEST_NAME = re.compile(r"(?:^|::)(test_\w+)$")
# A test LocalStack recorded on AWS, which the parity replays and the patches cite by name.
_RECORDED_ELSEWHERE = re.compile(r"LocalStack|snapshot|recorded|recording")


def _blocks(path: Path) -> list[str]:
    """A page's prose in the units a reader takes together: a paragraph, or a table row."""
    blocks: list[str] = []
    for paragraph in "\n".join(_prose(path.read_text(encoding="utf-8"))).split("\n\n"):
        lines = paragraph.splitlines()
        table = lines and all(line.startswith("|") for line in lines)
        blocks.extend(lines if table else [paragraph])
    return blocks


def missing_tests(path: Path) -> list[str]:
    """The tests a page names in backticks (`test_x`, `tests/..py::test_x`) that are not
    defined where it says, or anywhere under tests/; a test LocalStack recorded is named in
    a block that says so, and is not looked for here."""
    sources = {p: p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py")}
    defined = set(re.findall(r"^\s*(?:async )?def (test_\w+)", "\n".join(sources.values()), re.M))
    missing = []
    for block in _blocks(path):
        for span in _CODE_SPAN.findall(block):
            match = _TEST_NAME.search(span)
            if match is None:
                continue
            name, file_part = match.group(1), span.partition("::")[0]
            if file_part.startswith("tests/") and file_part.endswith(".py"):
                source = sources.get(ROOT / file_part, "")
                if not re.search(rf"^\s*(?:async )?def {name}\b", source, re.M):
                    missing.append(span)
            elif name not in defined and not _RECORDED_ELSEWHERE.search(block):
                missing.append(span)
    return missing


_MAKE = re.compile(r"^\s*make ([a-z][\w-]*)", re.MULTILINE)


def make_targets_named(path: Path) -> set[str]:
    """The make targets a page tells the reader to run: `make X` in a code span, or a line
    of a code block that starts with it."""
    text = path.read_text(encoding="utf-8")
    prose = _prose(text)
    spans = [span for line in prose for span in _CODE_SPAN.findall(line)]
    prose_lines = set(prose)
    code = [line for line in text.splitlines() if line not in prose_lines]
    return set(_MAKE.findall("\n".join(spans + code)))


def makefile_targets() -> set[str]:
    """The targets the Makefile defines (a rule's name at the start of a line)."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.MULTILINE))


# A command, then its words up to the end of the span or line, a comment, `|` or `;`.
_ONCEFLOW_COMMAND = re.compile(r"onceflow ([a-z]+)((?:[ \t]+[^\s`|;)#][^\s`|;)]*)*)")
_OPTION = re.compile(r"(?<![\w-])(--?[a-z][\w-]*)")


def command_options() -> dict[str, set[str]]:
    """Each `onceflow` command and the options its parser takes."""
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name: {option for action in parser._actions for option in action.option_strings}
        for name, parser in commands.choices.items()
    }


def unknown_options(path: Path) -> list[str]:
    """Each `onceflow COMMAND ... --option` a page shows whose command does not take the
    option (code blocks and prose alike)."""
    options = command_options()
    unknown = []
    for match in _ONCEFLOW_COMMAND.finditer(path.read_text(encoding="utf-8")):
        command, rest = match.group(1), match.group(2)
        if command in options:
            unknown += [
                f"onceflow {command} {o}"
                for o in _OPTION.findall(rest)
                if o not in options[command]
            ]
    return unknown


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ---- the README ------------------------------------------------------------------------


def test_the_readme_is_at_most_250_lines() -> None:
    # GIVEN the README, the page every newcomer reads first
    # WHEN its lines are counted
    lines = README.read_text(encoding="utf-8").splitlines()
    # THEN it fits in 250: the rest belongs in docs/
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move some to docs/"


def test_the_readme_starts_with_the_two_commands() -> None:
    # GIVEN the README
    text = README.read_text(encoding="utf-8")
    # WHEN its first code block is read
    first_block = text.split("```")[1]
    # THEN it is `make demo` and `make test`
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:]]
    assert [c for c in commands if c] == ["make demo", "make test"]


def test_the_readme_links_every_page_of_the_docs() -> None:
    # GIVEN the pages in docs/
    assert DOCS, "docs/ has no pages"
    # WHEN the README's links are collected
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    # THEN each page can be reached from the README
    assert [_name(p) for p in DOCS if p.resolve() not in linked] == []


# ---- links, paths and modules in every document ---------------------------------------


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_relative_link_reaches_a_file_and_a_heading(path: Path) -> None:
    # GIVEN a document and the links it holds
    assert relative_links(path) or path != README, "the README should link into docs/"
    # WHEN each is followed as GitHub would follow it
    problems = broken_links(path)
    # THEN the file exists and, for a #anchor, so does the heading
    assert problems == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_path_named_in_backticks_exists(path: Path) -> None:
    # GIVEN the repository paths a document names (onceflow/, functions/, tests/, ...)
    paths = cited_paths(path)
    # WHEN each is looked up from the repository's root
    missing = [p for p in paths if not (ROOT / p).exists()]
    # THEN none has moved or gone
    assert missing == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_test_a_page_names_exists(path: Path) -> None:
    # GIVEN the tests a document names as evidence (`test_x`, `tests/unit/test_y.py::test_x`)
    # WHEN each is looked up in tests/
    missing = missing_tests(path)
    # THEN none was renamed or removed under the claim it holds
    assert missing == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_make_target_a_page_names_exists(path: Path) -> None:
    # GIVEN the `make X` commands a document gives
    named = make_targets_named(path)
    # WHEN they are looked up in the Makefile
    # THEN each is a target of it
    assert sorted(named - makefile_targets()) == []


@pytest.mark.parametrize("path", [*DOCUMENTS, *EXAMPLES], ids=_name)
def test_every_option_a_page_gives_a_command_exists(path: Path) -> None:
    # GIVEN the `onceflow COMMAND --option` lines and spans of a document
    # WHEN each option is looked up in that command's parser
    unknown = unknown_options(path)
    # THEN the command takes it
    assert unknown == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_python_m_module_exists(path: Path) -> None:
    # GIVEN the `python -m` commands a document gives (run from the repository's root)
    modules = python_modules(path)
    # WHEN each module is looked up as `python -m` would
    missing = [m for m in modules if not module_exists(m)]
    # THEN each can be run
    assert missing == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_table_row_is_in_a_table(path: Path) -> None:
    # GIVEN a document's tables (the sample events, the parameters, the resources ...)
    # WHEN each row is read as GitHub renders it
    problems = stray_table_rows(path)
    # THEN none is swallowed by the paragraph above it (a paragraph once split "Try events")
    assert problems == []


def test_the_benchmark_page_carries_the_stored_run() -> None:
    # GIVEN the run `onceflow bench` stored and the copy docs/benchmarks.md shows
    stored = (ROOT / "bench" / "results.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    start, end = page.index(_BENCH_START) + len(_BENCH_START), page.index(_BENCH_END)
    # WHEN the stored run's headings are put one level down, under "The run below"
    expected = re.sub(r"^(#+) ", r"#\1 ", stored, flags=re.MULTILINE)
    # THEN the page shows that run, number for number
    assert page[start:end].strip() == expected.strip(), (
        "`onceflow bench` (its default --out) copies its run into docs/benchmarks.md; "
        "then check the prose of 'What the bill says'"
    )


# ---- the template's parameters ----------------------------------------------------------


def test_operate_documents_every_parameter_with_its_default() -> None:
    # GIVEN the template's parameters and the Parameters table of docs/operate.md
    parameters = load_template(TEMPLATE)["Parameters"]
    rows = parameter_rows(ROOT / "docs" / "operate.md", "## Parameters")
    # THEN the table names each parameter once and no other (P12 item 6: every one documented)
    assert sorted(rows) == sorted(parameters)
    # AND gives each the default the template deploys with
    wrong = {
        name: (rows[name], documented_default(spec.get("Default")))
        for name, spec in parameters.items()
        if rows[name] != documented_default(spec.get("Default"))
    }
    assert wrong == {}


def test_the_readmes_parameters_are_the_templates_with_their_defaults() -> None:
    # GIVEN the README's table of the parameters that matter most
    parameters = load_template(TEMPLATE)["Parameters"]
    rows = parameter_rows(README, "## Deploy")
    # THEN each is a parameter of the template, with the template's default
    assert rows, "the README's Deploy section has no parameter table"
    assert {n: d for n, d in rows.items() if n not in parameters} == {}
    assert {
        name: default
        for name, default in rows.items()
        if default != documented_default(parameters[name].get("Default"))
    } == {}


def test_the_design_doc_counts_the_hostile_corpus() -> None:
    # GIVEN the seeded corpus tests/workflow/test_hostile_inputs.py runs
    size = len(corpus("amzn-s3-demo-bucket"))
    # WHEN docs/design.md says how many inputs it holds
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    stated = re.search(r"seeded corpus of ([\d,]+) hostile inputs", design)
    # THEN the number is the corpus's
    assert stated is not None and int(stated.group(1).replace(",", "")) == size


# ---- the checker itself --------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("SQS batch mode (`SqsBatchMode=true`)", "sqs-batch-mode-sqsbatchmodetrue"),
        ("One engine for many commands: `onceflow up`", "one-engine-for-many-commands-onceflow-up"),
        ("6. The audit", "6-the-audit"),
        ("Versioned, unversioned and versioning-suspended buckets",
         "versioned-unversioned-and-versioning-suspended-buckets"),
    ],
)  # fmt: skip
def test_a_heading_gets_githubs_slug(heading: str, slug: str) -> None:
    # GIVEN a heading with code, punctuation and a number
    # WHEN it is slugged
    # THEN it is the anchor GitHub gives it
    assert github_slug(heading) == slug


def test_a_broken_link_a_missing_heading_and_a_moved_path_are_found(tmp_path: Path) -> None:
    # GIVEN a page whose links and paths point at what is not there, beside a page it links
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Same\n\n## Same\n\n"
        "[ok](#same-1) [ok](other.md#a-section) [gone](nowhere.md) [no heading](other.md#gone)\n"
        "[web](https://example.com/x.md) `onceflow/no_such_module.py` `onceflow/<stack name>`\n"
        "```bash\n# not a heading\npython -m onceflow.no_such_module\n```\n",
        encoding="utf-8",
    )
    # WHEN the checks read it
    problems = broken_links(page)
    paths, modules, slugs = cited_paths(page), python_modules(page), anchors(page)
    # THEN the missing file and heading are reported, the web link and the placeholder are not
    assert problems == [
        f"nowhere.md: no file {tmp_path.resolve() / 'nowhere.md'}",
        f"other.md#gone: {tmp_path.resolve() / 'other.md'} has no heading #gone",
    ]
    assert paths == ["onceflow/no_such_module.py"]
    assert not (ROOT / paths[0]).exists()
    assert modules == ["onceflow.no_such_module"]
    assert not module_exists("onceflow.no_such_module")
    assert not module_exists("onceflow.no_such_package.module")
    assert slugs == {"title", "same", "same-1"}


def test_a_row_glued_to_a_paragraph_is_found(tmp_path: Path) -> None:
    # GIVEN a page with a good table, a row under a paragraph, and a table with no separator
    page = tmp_path / "page.md"
    page.write_text(
        "| a | b |\n|---|---|\n| 1 | 2 |\n\nSome prose.\n| 3 | 4 |\n\n| c | d |\n| 5 | 6 |\n"
        "\n<!-- x:start -->\n| e | f |\n|:--|--:|\n",
        encoding="utf-8",
    )
    # WHEN its rows are checked
    # THEN the glued row and the table without a separator are found, the rest is not
    assert stray_table_rows(page) == [
        "under a line of prose: | 3 | 4 |",
        "a table without a separator line: | c | d |",
    ]


def test_a_renamed_test_is_found_and_a_recorded_one_is_not(tmp_path: Path) -> None:
    # GIVEN a page naming a real test, a gone one, a node id whose file lacks it, and a
    # test LocalStack recorded
    page = tmp_path / "page.md"
    page.write_text(
        "`test_a_heading_gets_githubs_slug` `test_no_longer_here`\n"
        "`tests/unit/test_docs.py::test_no_longer_here_either`\n\n"
        "LocalStack's `test_base_scenarios` snapshot\n",
        encoding="utf-8",
    )
    # WHEN its tests are looked up THEN the two gone ones are named
    assert missing_tests(page) == [
        "test_no_longer_here",
        "tests/unit/test_docs.py::test_no_longer_here_either",
    ]


def test_make_targets_are_read_from_code_not_prose(tmp_path: Path) -> None:
    # GIVEN a page naming targets in a code span and a code block, and "make" in prose
    page = tmp_path / "page.md"
    page.write_text(
        "Run `make demo`, then\nmake it yours.\n\n```bash\nmake no-such-target  # x\n```\n",
        encoding="utf-8",
    )
    # WHEN its targets are read THEN the prose's "make it" is not one, the others are
    assert make_targets_named(page) == {"demo", "no-such-target"}
    assert "no-such-target" not in makefile_targets() and "demo" in makefile_targets()


def test_an_option_the_command_does_not_take_is_found(tmp_path: Path) -> None:
    # GIVEN a page with a real option, an option of another command, and an unknown one
    page = tmp_path / "page.md"
    page.write_text(
        "`onceflow demo --seed 7` and `onceflow audit --seed 7`\n\n"
        "```bash\nonceflow execute X -e events/a.json --no-such-flag  # comment --not-read\n```\n",
        encoding="utf-8",
    )
    # WHEN its options are checked THEN the two wrong ones are named
    assert unknown_options(page) == ["onceflow audit --seed", "onceflow execute --no-such-flag"]


@pytest.mark.parametrize("page", DOCUMENTS, ids=lambda p: p.name)
def test_each_generated_block_has_one_start_and_one_end_marker(page: Path) -> None:
    # GIVEN a page that embeds generated blocks between <!-- NAME:start ... --> markers
    text = page.read_text(encoding="utf-8")
    starts = re.findall(r"<!-- ([a-z-]+):start", text)
    ends = re.findall(r"<!-- ([a-z-]+):end", text)
    # THEN each block is opened once and closed once
    assert sorted(starts) == sorted(set(starts)), f"a start marker twice: {starts}"
    assert sorted(starts) == sorted(ends)
