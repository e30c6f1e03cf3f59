"""Attacks on trained models: canary exposure, reconstruction and membership inference."""
