"""The environment doctor: why CUDA is (not) usable here, and how to fix it."""
