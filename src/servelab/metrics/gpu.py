"""GPU telemetry through NVML (``nvidia-ml-py``), sampled during a measured phase.

Where NVML is missing (no NVIDIA driver, a remote server, this CI) the sampler is silent and the
phase gets no GPU figures: never an error. Samples every ``SAMPLE_INTERVAL_S`` of every visible
GPU (those ``CUDA_VISIBLE_DEVICES`` names, by index or ``GPU-`` UUID, where servelab's environment
sets it: a server launched with it, among others on the same host; else every GPU NVML sees): power (W, ``nvmlDeviceGetPowerUsage``), memory used (GiB), GPU utilisation (%), SM clock (MHz)
and temperature (°C); once, its maximum SM clock (``nvmlDeviceGetMaxClockInfo``) and power limit
(``nvmlDeviceGetEnforcedPowerLimit``), so that a power-capped phase can be told (``servelab.rules.diagnose``). Energy = Σ power × interval over the phase (J), summed over GPUs; energy
per output token = energy ÷ output tokens of the phase (docs/metrics.md, "GPU telemetry").
"""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel

SAMPLE_INTERVAL_S = 1.0


class GpuStats(BaseModel):
    """GPU figures of one phase (all GPUs: power and energy summed; the others peak or mean)."""

    gpus: int
    samples: int
    mean_power_w: float
    peak_power_w: float
    energy_j: float
    energy_per_output_token_j: float | None = None
    peak_memory_used_gib: float
    mean_utilization_pct: float
    mean_sm_clock_mhz: float
    peak_temperature_c: float
    max_sm_clock_mhz: float | None = None  # the lowest of the GPUs' maximum SM clocks; None where NVML did not say (runs before 2026-11-26)
    power_limit_w: float | None = None  # the GPUs' enforced power limits, summed like the power


def _nvml():
    """The initialised ``pynvml`` module, or None when NVML cannot be used here."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # ImportError, NVMLError_LibraryNotFound, driver errors: no telemetry
        return None


def _visible(nv, visible: str | None) -> list:
    """NVML handles of the GPUs ``visible`` (CUDA_VISIBLE_DEVICES: indices, ``GPU-`` UUIDs, or empty
    for none) names; every GPU when it is unset or names a device otherwise (a MIG slice). Indices
    are NVML's, the PCI bus order, which CUDA follows with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on
    hosts of one GPU model."""
    every = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    if visible is None:
        return every
    names = [n.strip() for n in visible.split(",") if n.strip()]
    if all(n.isdigit() for n in names):
        return [every[int(n)] for n in names if int(n) < len(every)]
    if all(n.startswith("GPU-") for n in names):
        return [nv.nvmlDeviceGetHandleByUUID(n) for n in names]
    return every


class GpuSampler:
    """Samples NVML in the background between ``start()`` and ``stop()``; ``stop`` returns :class:`GpuStats` or None."""

    def __init__(self) -> None:
        self.nv = None
        self.handles: list = []
        self.rows: list[tuple[float, float, float, float, float, float]] = []  # t, W, GiB, %, MHz, °C
        self.limits: tuple[float | None, float | None] = (None, None)  # max SM clock (MHz), power limit (W)
        self._task: asyncio.Task | None = None

    def _sample(self) -> None:
        nv, t = self.nv, time.perf_counter()
        power = mem = util = clock = temp = 0.0
        for h in self.handles:
            power += nv.nvmlDeviceGetPowerUsage(h) / 1000
            mem += nv.nvmlDeviceGetMemoryInfo(h).used / 2**30
            util += nv.nvmlDeviceGetUtilizationRates(h).gpu / len(self.handles)
            clock += nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) / len(self.handles)
            temp = max(temp, nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        self.rows.append((t, power, mem, util, clock, temp))

    async def _loop(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def start(self) -> None:
        """Begin sampling, if NVML is available."""
        self.nv = _nvml()
        if self.nv is None:
            return
        try:
            self.handles = _visible(self.nv, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception:  # driver trouble mid-run: give up on telemetry, not on the run
            self.nv = None
            return
        try:
            self.limits = (float(min(self.nv.nvmlDeviceGetMaxClockInfo(h, self.nv.NVML_CLOCK_SM) for h in self.handles)),
                           sum(self.nv.nvmlDeviceGetEnforcedPowerLimit(h) for h in self.handles) / 1000)  # fmt: skip
        except Exception:  # not every device reports them (a vGPU, a MIG slice): the figures, without the cap's
            self.limits = (None, None)
        self._task = asyncio.create_task(self._loop())

    async def stop(self, output_tokens: int | None = None) -> GpuStats | None:
        """End sampling and summarise; None without NVML or samples."""
        if self._task is None:
            return None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        try:
            self._sample()
        except Exception:
            pass
        rows = self.rows
        if len(rows) < 2:
            return None
        energy = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(rows, rows[1:], strict=False))  # trapezoids
        n = len(rows)
        return GpuStats(
            gpus=len(self.handles),
            samples=n,
            mean_power_w=sum(r[1] for r in rows) / n,
            peak_power_w=max(r[1] for r in rows),
            energy_j=energy,
            energy_per_output_token_j=energy / output_tokens if output_tokens else None,
            peak_memory_used_gib=max(r[2] for r in rows),
            mean_utilization_pct=sum(r[3] for r in rows) / n,
            mean_sm_clock_mhz=sum(r[4] for r in rows) / n,
            peak_temperature_c=max(r[5] for r in rows),
            max_sm_clock_mhz=self.limits[0],
            power_limit_w=self.limits[1],
        )
