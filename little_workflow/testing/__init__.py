"""Reliability testing tools — reusable by users testing their own workflows.

`faults`: crash a World's storage at its N-th operation (`FaultyFileSystem`,
`faulty_local_world`). `powercut`: a POSIX system-call layer that keeps only what a power
cut would leave (`PowerCutPosix`, `power_cut_filesystem`).
"""

from ..world.clock import FakeClock
from .faults import FaultPlan, FaultyFileSystem, SimulatedCrash, faulty_local_world
from .powercut import PowerCutPosix, power_cut_filesystem

__all__ = [
    "FakeClock",
    "FaultPlan",
    "FaultyFileSystem",
    "PowerCutPosix",
    "SimulatedCrash",
    "faulty_local_world",
    "power_cut_filesystem",
]
