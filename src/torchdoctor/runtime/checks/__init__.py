"""The runtime checks: each module watches one concern and turns events into findings."""
