"""Tools for testing differentiable ops: ``gradcheck`` and ``gradgradcheck`` here, and
hypothesis strategies in ``nbgrad.testing.strategies`` (needs hypothesis installed)."""

from .gradcheck import (
    GradcheckError,
    OpReport,
    check_registered,
    gradcheck,
    gradcheck_report,
    gradgradcheck,
    gradgradcheck_report,
    sample_call,
    saved_by,
)

__all__ = ["GradcheckError", "OpReport", "check_registered", "gradcheck", "gradcheck_report",
           "gradgradcheck", "gradgradcheck_report", "sample_call", "saved_by"]
