"""Which object keys a stack processes: KeyPrefix and KeySuffix, as its rule matches them.

The template's rule matches a key with EventBridge's prefix or suffix operator, or,
with both, with one wildcard ``<prefix>*<suffix>``, whose ``*`` matches zero or more
characters (eb-create-pattern-operators.html). So a key is the stack's when it starts
with the prefix and ends with the suffix and the two do not overlap. The template
allows only characters that read the same in a URL-encoded key (the form EventBridge
matches) and in the key itself, and no ``*`` or ``\\`` (the wildcard's own), so the
audit can judge the plain key the listing gives exactly as the rule judged its event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyFilter:
    """KeyPrefix and KeySuffix; both empty (the default): every key."""

    prefix: str = ""
    suffix: str = ""

    def matches(self, key: str) -> bool:
        """Whether the rule passes the events of this key."""
        return (
            key.startswith(self.prefix)
            and key.endswith(self.suffix)
            and len(key) >= len(self.prefix) + len(self.suffix)
        )

    def listing_prefix(self, asked: str) -> str | None:
        """The prefix to list for a run that asked for ``asked`` ("": the whole filter).

        The longer of the two when one extends the other; None when they part
        (nothing under ``asked`` is the stack's).
        """
        if asked.startswith(self.prefix):
            return asked
        if self.prefix.startswith(asked):
            return self.prefix
        return None

    def describe(self) -> str:
        """The filter as an operator reads it: ``<prefix>*<suffix>``, or "every key"."""
        return f"{self.prefix}*{self.suffix}" if self.prefix or self.suffix else "every key"
