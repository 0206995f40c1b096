_version = "0.11.0"
__version__ = _version
