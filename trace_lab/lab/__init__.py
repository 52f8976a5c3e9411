"""The lab's entry points: run a function through the run stage and return a Report.

The stage above :mod:`trace_lab.report` (the run stage makes records, the report stage turns them
into views; these modules do both for one call):

* :mod:`.inspection` - ``inspect``: compile, run, check against eager and measure one call;
* :mod:`.peers` - the same call as eager / torch.compile / reduce-overhead run it (``--baseline``);
* :mod:`.thunder_view` - ``from_thunder``: lightning-thunder's traces and programs as a Report.

The notebook, the CLI and the facade (``trace_lab.inspect``) call these.
"""
