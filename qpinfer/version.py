"""The package version (one place, imported by the package and by modules that report it)."""

__version__ = "0.1.0"
