# SPDX-License-Identifier: Apache-2.0
# Stand-in for XLA's GPU client (not JAX's code): a compile is counted (a
# file in $JAXSTUB_MARKS), takes $JAXSTUB_SLEEP seconds, fails for the
# modules named in $JAXSTUB_FAIL; an executable is bytes of its module's.
import hashlib
import os
import threading
import time


class Device:
  def __init__(self, i):
    self.id = i
    self.process_index = 0
    self.device_kind = os.environ.get("JAXSTUB_DEVICE_KIND", "NVIDIA H100 80GB HBM3")


class Devices:
  """What np.ndarray of devices offers the cache: .flat."""

  def __init__(self, devs):
    self.flat = list(devs)


class Executable:
  def __init__(self, payload: bytes):
    self.payload = payload

  def serialize(self):
    return b"exe:" + self.payload


class Backend:
  platform = "gpu"
  platform_version = "cuda 13000"
  runtime_type = "pjrt"

  def compile_and_load(self, module, executable_devices, options):
    marks = os.environ.get("JAXSTUB_MARKS")
    if marks:
      os.makedirs(marks, exist_ok=True)
      with open(os.path.join(marks, "compile.%s.%d.%d" % (module.name, os.getpid(),
                                                           threading.get_ident())), "w"):
        pass
    time.sleep(float(os.environ.get("JAXSTUB_SLEEP", "0")))
    if module.name in os.environ.get("JAXSTUB_FAIL", "").split(","):
      raise RuntimeError("XLA compile of %s failed" % module.name)
    return Executable(hashlib.sha256(module.text.encode()).digest() * 64)

  def deserialize_executable(self, serialized, executable_devices, options):
    assert serialized.startswith(b"exe:")
    return Executable(serialized[4:])


_backend = Backend()


def get_backend():
  return _backend


def devices():
  return Devices([Device(0)])


class Module:
  def __init__(self, name, text):
    self.name = name
    self.text = text
