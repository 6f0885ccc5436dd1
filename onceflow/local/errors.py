"""What the local engine refuses, in words its user acts on: a command prints them, no traceback.
Apart from the engine so that `onceflow redrive --stack-name` names them without moto."""

from __future__ import annotations


class EngineError(Exception):
    """The local engine could not do what was asked."""


class ExecutionTimeout(EngineError):
    """An execution did not finish within the deadline."""


class WrongEvent(Exception):
    """An event of a shape its target never receives on AWS; the message names the sample."""
