"""Conditional disaggregation: the Ray Serve code the Ray nodes import (:mod:`.conditional`) and its archive (:mod:`.bundle`)."""
