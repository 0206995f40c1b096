# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_dynamo/pgo.py (PyTorch 2.11): the profile of
dynamic shapes, read at the first compile and written after each, under
get_cache_key() (f"{job_id}:{rank}:{tag}", None without a job id), through
the remote cache RemoteDynamoPGOCache as {"data": base64 of the pickle}.
The profile here: {frame: {input: [sizes seen]}}."""
import base64
import pickle

import torch._dynamo.config
import torch.compiler.config
from torch._inductor.remote_cache import create_cache

_CODE_STATE = None
_INIT = None
hits = []


def get_cache_key():
    if (r := torch.compiler.config.job_id) is not None:
        return "%s:%s:%s" % (r, None, torch.compiler.config.cache_key_tag)
    return None


def get_remote_cache():
    if not torch._dynamo.config.automatic_dynamic_remote_pgo:
        return None
    return create_cache("dynamo-pgo", False, "FbRemoteDynamoPGOCache", "RemoteDynamoPGOCache")


def get_code_state():
    global _CODE_STATE, _INIT
    if _CODE_STATE is not None:
        return _CODE_STATE
    _CODE_STATE = {}
    key = get_cache_key()
    rc = get_remote_cache() if key is not None else None
    if rc is not None:
        data = rc.get(key)
        if data is not None:
            _CODE_STATE = pickle.loads(base64.b64decode(data["data"]))
            hits.append(key)
    _INIT = pickle.dumps(_CODE_STATE)
    return _CODE_STATE


def put_code_state():
    if _CODE_STATE is None or pickle.dumps(_CODE_STATE) == _INIT:
        return
    key = get_cache_key()
    rc = get_remote_cache() if key is not None else None
    if rc is not None:
        rc.put(key, {"data": base64.b64encode(pickle.dumps(_CODE_STATE)).decode("ascii")})
