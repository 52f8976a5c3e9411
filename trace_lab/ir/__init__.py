"""The IR: the Trace (an fx graph with names and memory metadata) and its printed form."""
