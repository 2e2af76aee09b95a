"""Builds the SeZM energy model from a config dict (registered as model kind "sezm")."""
