"""The diagrams of docs/design.md are generated from the ASL and must not drift from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onceflow.asl import diagram
from onceflow.cli import main


def test_the_design_doc_diagrams_match_the_asl() -> None:
    assert diagram.stale() == [], "run: .venv/bin/onceflow diagrams --write"


def test_the_graph_has_every_state_and_transition_of_the_asl() -> None:
    g = diagram.graph(diagram.load_asl(diagram.MACHINES["processor"]))
    edges = {(e.source, e.target, e.kind) for e in g.edges}
    # the duplicate path, and where a fence rejection leads
    assert ("Claim", "Reclaim", "catch") in edges
    assert ("Reclaim", "Duplicate", "catch") in edges
    assert ("MarkComplete", "LockLost", "catch") in edges
    assert ("Claim", "UnreadableEvent", "catch") in edges
    assert ("UnreadableEvent", "DescribeInvalidEvent", "default") in edges
    audit = diagram.graph(diagram.load_asl(diagram.MACHINES["audit"]))
    assert audit.children["AuditListing"] == ["AuditListedBatch"]
    assert audit.children["AuditInventory"] == ["AuditInventoryBatch"]
    audit_edges = {(e.source, e.target, e.kind) for e in audit.edges}
    assert ("ObjectSource", "SelectWindow", "choice") in audit_edges
    assert ("WindowHasObjects", "AuditInventory", "choice") in audit_edges
    assert ("AuditListing", "SweepLocks", "catch") in audit_edges
    assert ("MoreLocks", "SweepLocks", "choice") in audit_edges


def _copy(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    readme = tmp_path / "design.md"
    shutil.copy(diagram.README, readme)
    machines = {}
    for name, path in diagram.MACHINES.items():
        machines[name] = tmp_path / path.name
        shutil.copy(path, machines[name])
    return readme, machines


def test_a_changed_asl_makes_the_diagram_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme, machines = _copy(tmp_path)
    monkeypatch.setattr(diagram, "MACHINES", machines)
    assert diagram.stale(readme) == []
    text = machines["audit"].read_text(encoding="utf-8")
    changed = text.replace("Open work left, and the last call used all its time.", "Locks left.")
    machines["audit"].write_text(changed, "utf-8")
    assert diagram.stale(readme) == ["audit"]


def test_check_and_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme, machines = _copy(tmp_path)
    monkeypatch.setattr(diagram, "MACHINES", machines)
    monkeypatch.setattr(diagram, "README", readme)
    text = machines["audit"].read_text(encoding="utf-8")
    changed = text.replace("Open work left, and the last call used all its time.", "Locks left.")
    machines["audit"].write_text(changed, "utf-8")
    assert main(["diagrams", "--check"]) == 1
    assert "audit diagram differs" in capsys.readouterr().out
    assert main(["diagrams", "--write"]) == 0
    assert 'MoreLocks -->|"Locks left"| SweepLocks' in readme.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["diagrams", "--check"]) == 0
    # A check that passed says so
    assert capsys.readouterr().out == (
        "docs/design.md: the diagrams (processor, audit) match their ASL files\n"
    )


def test_a_document_without_the_blocks_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "design.md"
    readme.write_text("# no diagrams here\n", encoding="utf-8")
    monkeypatch.setattr(diagram, "README", readme)
    assert main(["diagrams", "--write"]) == 2
    assert "has no <!-- diagram:processor" in capsys.readouterr().err


def test_state_names_mermaid_cannot_read_get_ids_of_their_own() -> None:
    asl = {
        "StartAt": "end",
        "States": {
            "end": {"Type": "Pass", "Next": "two words"},
            "two words": {
                "Type": "Choice",
                "Choices": [{"Comment": 'say "hi" #1', "Condition": "{% true %}", "Next": "ok"}],
                "Default": "ok",
            },
            "ok": {"Type": "Succeed"},
        },
    }
    text = diagram.mermaid(asl)
    assert "start((start)) --> s0" in text
    assert 's0["end"]' in text and 's1{"two words"}' in text
    assert 's1 -->|"say #quot;hi#quot; #35;1"| ok' in text
    assert "two words -->" not in text


def test_a_transition_to_no_state_is_an_error() -> None:
    asl = {"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}}
    with pytest.raises(ValueError, match="A goes to B, which is not a state"):
        diagram.graph(asl)


@pytest.mark.parametrize(
    "path", [diagram.MACHINES["processor"], diagram.ROOT / "statemachines" / "batch.asl.json"]
)
def test_every_event_enters_at_claim(path: Path) -> None:
    """P12 item 3: no state reads the event before Claim (each is a transition STANDARD
    bills); Claim's rules read every shape, and a refused event leaves it by its Catch."""
    # GIVEN the graph the docs and the execution viewer draw
    g = diagram.graph(diagram.load_asl(path))
    # THEN only Claim is entered from the start (the batch's TakeMessage names its owner first)
    into_claim = [e.source for e in g.edges if e.target == "Claim"]
    assert g.start == "Claim" or into_claim == ["TakeMessage"], (g.start, into_claim)
    assert ("Claim", "UnreadableEvent", "catch") in {(e.source, e.target, e.kind) for e in g.edges}
