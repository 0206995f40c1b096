# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/compiler (see tests/jitstubs/README.md)."""
