"""Use cases: what a function does, over the data layer and the pure logic."""
