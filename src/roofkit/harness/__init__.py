"""The proof harness: specs, registry, verification, timing, device ceilings, roofline, reports.

It is generic: it knows nothing about any single op and judges any implementation, roofkit's or
a user's, through the op's :class:`~roofkit.harness.spec.OpSpec`.
"""
