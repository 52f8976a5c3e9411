"""Executors turn a final Trace into a runnable program (see :mod:`.base`)."""
from .base import EXECUTORS, CompiledProgram, Executor, get_executor, register, resolve_executor

__all__ = ["EXECUTORS", "CompiledProgram", "Executor", "get_executor", "register", "resolve_executor"]
