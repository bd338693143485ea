"""Shared by every model of both papers: labelled results, compile-and-cache of
generated numba source, argument validation, progress bars and trajectory plots.
Imports nothing from :mod:`attndyn.numeric.attention`, ``transformer`` or ``scaling``."""
