"""Commands that need heavier imports; loaded by name from gpuaudit.cli."""
