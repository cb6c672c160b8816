"""Device-dependent features (CDMPP §4.3): `DeviceSpec.feature_vector()` as an extractor."""

from __future__ import annotations

import numpy as np

from .base import FeatureExtractor, register

DEVICE_FEATURES = (
    "log2_clock_mhz", "log2_memory_gb", "log2_bandwidth_gbps", "cores", "threads", "log2_peak_fp32_gflops",
    "log2_peak_fp16_gflops", "log2_l1_kb", "log2_l2_kb", "log2_l3_kb", "vector_bits",
)


@register
class DeviceExtractor(FeatureExtractor):
    """A device (a `DeviceSpec` or a device id such as "local" or "t4") -> float64 vector of length 11.

    Entries in `DEVICE_FEATURES` order, as `DeviceSpec.feature_vector()` computes them (log2 where the range spans
    decades; an unknown figure gives 0). Version 2 rounds the clock to 10 MHz and the peak FLOPS to 3 significant
    figures (`devices.base.canonical_vector`): version 1 carried the probe's day-to-day clock drift.
    """

    name = "device"
    version = 2
    input_kind = "device"
    ndim = 1

    def feature_names(self) -> list[str]:
        return list(DEVICE_FEATURES)

    def extract(self, device) -> np.ndarray:
        from ..devices import DeviceSpec, get_device

        spec = device if isinstance(device, DeviceSpec) else get_device(str(device))
        v = np.array(spec.feature_vector(), dtype=np.float64)
        if v.shape != (self.length,):
            raise AssertionError(f"DeviceSpec.feature_vector() has {v.shape[0]} entries, expected {self.length}: "
                                 "update DEVICE_FEATURES and bump the version")
        return v
