"""The tool's version, recorded in every result."""
__version__ = "0.2.0"
