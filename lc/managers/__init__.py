"""One manager per Sedna kind the LC handles on its node (see lc/managers/base.py)."""
