"""gpuaudit: why do GPU jobs queue while the GPUs look idle?"""

__version__ = "0.1.0"
