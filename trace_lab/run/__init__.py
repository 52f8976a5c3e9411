"""The run stage: the jitted callable, inspect, measurement, the eager check, the memory promise."""
