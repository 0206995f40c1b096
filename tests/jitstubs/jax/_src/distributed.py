# SPDX-License-Identifier: Apache-2.0
# jax/_src/distributed.py (0.11): the process's place in a multi-process job.
import os


class State:
  process_id: int = 0


global_state = State()
global_state.process_id = int(os.environ.get("JAXSTUB_PROCESS_ID", "0"))
