"""Tools for testing differentiable ops: ``gradcheck`` here, and hypothesis strategies in
``nbgrad.testing.strategies`` (needs hypothesis installed)."""

from .gradcheck import GradcheckError, OpReport, check_registered, gradcheck, gradcheck_report

__all__ = ["GradcheckError", "OpReport", "check_registered", "gradcheck", "gradcheck_report"]
