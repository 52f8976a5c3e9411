"""The run stage: the jitted callable (:mod:`.jit`), what compiling each program part made
(:mod:`.compilation`: CompilationRecord, what the views read), the eager check (:mod:`.compare`),
the memory promise (:mod:`.memory_guard`), predict, repro, line profiles. It makes records; the
report stage turns them into views, and :mod:`trace_lab.lab` (inspect) does both for one call."""
