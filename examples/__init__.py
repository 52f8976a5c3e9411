"""The seed workloads of trace_lab (see :mod:`examples.workloads`); each file also runs as a script."""
