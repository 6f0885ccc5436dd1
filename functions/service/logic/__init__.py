"""Business logic with no AWS calls."""
