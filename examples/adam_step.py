"""Example: the 'adam_step' workload (see examples/workloads.py). Run: python -m examples.adam_step --help"""
if __name__ == "__main__":
    from ._cli import main

    main("adam_step")
