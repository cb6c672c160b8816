"""Device registry: `local` (this machine and its code-generation variants) and known remote devices."""

from . import local  # noqa: F401  (registers "local")
from .base import DeviceSpec, device_help, get_device, list_devices, parse_device_id, register

__all__ = ["DeviceSpec", "get_device", "list_devices", "device_help", "parse_device_id", "register"]
