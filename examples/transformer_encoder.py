"""Example: the 'transformer_encoder' workload (see examples/workloads.py). Run: python -m examples.transformer_encoder --help"""
if __name__ == "__main__":
    from ._cli import main

    main("transformer_encoder")
