"""The version of gpuscope, importable from every stage without importing the package's API."""

__version__ = "0.1.0"
