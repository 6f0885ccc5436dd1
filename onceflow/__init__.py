"""onceflow: exactly-once effect for AWS event-driven work: the local engine, CLI and bench."""
