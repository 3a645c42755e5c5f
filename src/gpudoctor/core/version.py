"""The package version: one figure, read by ``gpudoctor.__version__``, the reports and
pyproject.toml."""

__version__ = "0.1.0"
