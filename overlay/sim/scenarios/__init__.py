"""Simulation scenarios: build a world in the simulator, run it, summarize it."""
