"""Lambda entry points, one module per function."""
