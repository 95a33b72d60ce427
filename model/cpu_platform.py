"""A CPU platform for verl's platform plugin registry (``verl.plugin.platform``).

verl 0.9 resolves its device (``get_device_name``, ``get_device_id``,
``get_nccl_backend``, ...) through a platform singleton. Without a CPU platform
it falls back to CUDA and fails with "Torch not compiled with CUDA enabled".
``install()`` registers :class:`PlatformCPU` under the name ``cpu`` with
``PlatformRegistry.register``, makes it current with ``set_platform`` (it must
run before ``verl.workers.engine`` is imported: that module reads the device
name at import time), and applies the few CPU workarounds verl's FSDP engine
needs:

* ``verl.utils.fsdp_utils.load_fsdp_model_to_gpu`` / ``offload_fsdp_model_to_cpu``
  become no-ops (on CPU there is nothing to move, and the FSDP1 variant builds
  the device string ``f"{device_name}:{device_id}"`` = ``"cpu:cpu"``);
* FSDP1's ``sync_module_states=True`` (verl always passes it) refuses CPU
  tensors ("The module has CPU parameters or buffers when
  `sync_module_states=True`"). The check is disabled; the broadcast itself
  (``dist._broadcast_coalesced`` over gloo) still runs, so ranks other than 0
  really receive rank 0's weights, as on a GPU.
"""
from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any, Optional

import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform


class _CPUDeviceModule(ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on the device module
    (``empty_cache``, ``ipc_collect``, ``memory_allocated``, ...), as no-ops."""

    def __getattr__(self, name):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
            return lambda *a, **k: 0
        if name == "mem_get_info":
            return lambda *a, **k: (0, 0)
        if name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_device", "manual_seed",
                    "manual_seed_all"):
            return _noop
        raise AttributeError(f"CPU device module has no attribute {name!r}")


_CPU_DEVICE_MODULE = _CPUDeviceModule("reshardip_cpu_device")


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform backed by the host CPU; collectives over gloo."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        # Never auto-detected: only used when installed explicitly.
        return False

    def current_device(self):
        # verl uses the device id both as ``tensor.to(device_id)`` and as
        # FSDP1's ``device_id``; an int would mean ``cuda:<int>``.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CPU_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


_installed = False


def _noop(*args, **kwargs):
    return None


def install() -> PlatformCPU:
    """Make the CPU platform current and patch verl/torch for CPU + gloo. Idempotent."""
    global _installed
    from verl.plugin.platform import get_platform
    if _installed:
        return get_platform()
    platform = PlatformRegistry.get("cpu")()
    set_platform(platform)

    import verl.utils.fsdp_utils as fsdp_utils
    fsdp_utils.load_fsdp_model_to_gpu = _noop
    fsdp_utils.offload_fsdp_model_to_cpu = _noop
    import torch.distributed.fsdp._init_utils as init_utils
    init_utils._check_module_states_for_sync_module_states = _noop

    # The engine module imports these names directly; patch its copies too.
    import verl.workers.engine.fsdp.transformer_impl as impl
    assert impl.device_name == "cpu", "verl.workers.engine was imported before the CPU platform was installed"
    impl.load_fsdp_model_to_gpu = _noop
    impl.offload_fsdp_model_to_cpu = _noop
    _installed = True
    return platform
