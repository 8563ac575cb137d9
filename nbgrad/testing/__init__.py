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
)

__all__ = ["GradcheckError", "OpReport", "check_registered", "gradcheck", "gradcheck_report",
           "gradgradcheck", "gradgradcheck_report"]
