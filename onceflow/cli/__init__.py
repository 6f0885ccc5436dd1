"""The `onceflow` command line (main: its parser and how a command runs; session: what a
command runs with; local_commands, stack_commands, diagrams: the commands)."""

from onceflow.cli.main import main
from onceflow.cli.session import FRESH_STACK

__all__ = ["FRESH_STACK", "main"]
