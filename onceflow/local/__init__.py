"""The emulator: template.yaml's resources on moto, its ASL and handlers run as they are.

Its modules: docs/architecture.md, "What each owns" (local/). Importing this package
imports nothing: moto loads with the engine, not before.
"""

# The recursion limit while an engine runs (and `onceflow execute` reads an event file):
# Python's default (1,000) would give up before the processor's JSONata does (about 2,300
# levels under node: docs/ingress.md, "Deep nesting"), so the engine's Python never judges
# an input's depth first (docs/local-engine.md, "Handlers run in the engine's Python").
RECURSION_LIMIT = 20_000
