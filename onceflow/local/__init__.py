"""The emulator: template.yaml's resources on moto, its ASL and handlers run as they are.

Its modules: docs/architecture.md, "What each owns" (local/). Importing this package
imports nothing: moto loads with the engine, not before.
"""
