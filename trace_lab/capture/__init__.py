"""The capture stage: torch.compile + AOTAutograd record each program as fx graphs."""
