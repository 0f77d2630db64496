"""The broker's HTTP listener."""
