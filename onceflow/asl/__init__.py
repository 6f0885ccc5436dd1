"""The state machine definitions' own tooling: their graphs and the diagrams of docs/design.md
(diagram), the deployed JSON generated from commented YAML (asl_source) and the batch
mode's definition from the processor's own source (batch_definition), and the worst-case duration
of an EXPRESS execution (worstcase).

Reads files only: it runs nothing, and imports nothing of onceflow but the project.
"""

# End states that are not Succeed or Fail states, and the outcome each names. The
# processor's happy path ends on MarkComplete (End: true), to take three transitions
# (Claim, Process, MarkComplete: P12 item 3); its outcome stays "Processed", as the batch
# workflow's Succeed state of that name (batch_definition.py) and the dashboard call it.
END_OUTCOMES = {"MarkComplete": "Processed"}


def outcome(last_state: str | None, succeeded: bool = True) -> str | None:
    """The outcome an execution (or a batch's iteration) names by the last state it
    entered: that state's name, or the outcome of an end Task once it succeeded."""
    if last_state is None or not succeeded:
        return last_state
    return END_OUTCOMES.get(last_state, last_state)
