"""perfcast: learned performance models for tensor programs, layers and whole networks."""

__version__ = "0.1.0"
