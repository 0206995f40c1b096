# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for PyTorch (see tests/jitstubs/README.md)."""
__version__ = "2.11.0"
