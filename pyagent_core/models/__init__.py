"""Model loading for the reference engine."""
