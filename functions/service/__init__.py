"""onceflow's Lambda functions: thin handlers over plain logic and a small data layer."""
