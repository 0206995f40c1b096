# SPDX-License-Identifier: Apache-2.0
_version = "0.11.0"
__version__ = _version
