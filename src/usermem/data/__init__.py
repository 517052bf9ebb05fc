"""Labelled data sets shipped with usermem (evaluation and tests)."""
