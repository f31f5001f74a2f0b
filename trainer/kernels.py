"""Which CPU kernels TensorFlow trains with: oneDNN's, also where TensorFlow leaves them off.

TensorFlow's Linux x86 wheels turn oneDNN on by default only on CPUs with
neural-network instructions (AVX512_VNNI, AVX512_BF16, AMX: Cascade Lake and
newer Xeons; TensorFlow 2.9 release notes). Everywhere else, AMD EPYC among them
(the N2D, C2D and E2 machine families, and this project's CI machines), it runs
its own Eigen kernels. There the flowers CNN's float32 training step took 644 ms
with Eigen and 255 ms with oneDNN, measured with ``bench/profile_trainer.py``
(docs/trainer.md): Eigen's filter gradients and max-pool gradients are the
difference. The switch is read once, when TensorFlow loads, so it is set before
the first import; a value already in the environment wins, so
``TF_ENABLE_ONEDNN_OPTS=0`` still turns oneDNN off.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from trainstack_contract import ONEDNN_SWITCH


def prefer_onednn(environ: MutableMapping[str, str]) -> None:
    """Asks for oneDNN's kernels unless the environment already says; before TensorFlow loads."""
    environ.setdefault(ONEDNN_SWITCH, "1")


def onednn_enabled() -> bool:
    """Whether the TensorFlow loaded in this process runs oneDNN's kernels."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TensorFlow that moved its internals: say off rather than guess
        return False
    return bool(_pywrap_util_port.IsMklEnabled())
