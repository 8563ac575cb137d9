"""Tools for testing differentiable ops: gradcheck and hypothesis strategies."""

from .gradcheck import GradcheckError, gradcheck, gradcheck_report

__all__ = ["GradcheckError", "gradcheck", "gradcheck_report"]
