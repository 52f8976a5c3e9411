"""Reports: the views of a run (text, HTML, later graphs and plots)."""
from .report import Report

__all__ = ["Report"]
