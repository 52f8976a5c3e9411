"""Example: the 'memory_peak' workload (see examples/workloads.py). Run: python -m examples.memory_peak --help"""
if __name__ == "__main__":
    from ._cli import main

    main("memory_peak")
