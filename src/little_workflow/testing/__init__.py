"""Reliability testing tools — reusable by users testing their own workflows.

`faults`: crash a World's storage at its N-th operation (`FaultyFileSystem`,
`faulty_local_world`). `powercut`: a POSIX system-call layer that keeps only what a power
cut would leave (`PowerCutPosix`, `power_cut_filesystem`). `unfenced`: take the kernel
locks or the log fence (one executor per run) away (`without_kernel_locks`, `without_log_fence`),
to show that a check catches two executions of one run.
"""

from ..world.clock import FakeClock
from .faults import FaultPlan, FaultyFileSystem, SimulatedCrash, faulty_local_world
from .powercut import PowerCutPosix, power_cut_filesystem
from .unfenced import without_kernel_locks, without_log_fence

__all__ = [
    "FakeClock",
    "FaultPlan",
    "FaultyFileSystem",
    "PowerCutPosix",
    "SimulatedCrash",
    "faulty_local_world",
    "power_cut_filesystem",
    "without_kernel_locks",
    "without_log_fence",
]
