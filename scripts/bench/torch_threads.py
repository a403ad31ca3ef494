"""OpenBLAS and thread settings the PyTorch peers share (gpt_torch.py, resnet_torch.py):
torch.set_num_threads does not reach Debian's OpenBLAS thread pool, so both are set, and
the OpenBLAS kernel in use is reported next to every figure."""
import ctypes
import re

import torch


def _openblas(symbol):
    """A function of the OpenBLAS this process loaded (through torch), or None."""
    for path in sorted(set(re.findall(r"\S*libopenblas\S*\.so\S*", open("/proc/self/maps").read()))):
        try:
            return getattr(ctypes.CDLL(path), symbol)
        except (OSError, AttributeError):
            pass
    return None


def openblas_core():
    """The kernels OpenBLAS runs ("Haswell", "Prescott", ...)."""
    f = _openblas("openblas_get_corename")
    if f is None:
        return "none"
    f.restype = ctypes.c_char_p
    return f().decode()


def set_threads(n):
    """torch.set_num_threads does not reach Debian's OpenBLAS thread pool; set both."""
    torch.set_num_threads(n)
    f = _openblas("openblas_set_num_threads")
    if f is not None:
        f(ctypes.c_int(n))
