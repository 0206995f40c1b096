# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for Triton (see tests/jitstubs/README.md)."""
__version__ = "3.6.0"
