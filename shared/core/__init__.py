"""The framework-neutral core: what every other layer stands on.

    schema     fixture fields and their validation
    records    the Scenario / Porting record types
    registry   finds the records in shared/scenarios/ (teaching order)
    fixtures   make / from_arrays: validated, immutable numpy fixtures
    tolerance  the Tolerance record and the per-dtype tolerance table
    parity     the strict comparator and the zero / non-zero lesson pattern
    oracle     float64 helpers of the oracles (finite differences, SGD, AdamW)
    checks     argument checks shared by both frameworks (shapes, variants)
    contracts  the run(fx, variant) contract of both implementations
    lessons    the loader of the implementations (FRAMEWORKS, lesson, source_path)
    verdict    CaseResult: what one case produced and how it is judged
    runner     one case run end to end (and the cases of a selection)
    toys       toy arrays of the tutorial-claim checks
    children   every process the package starts: start, parent death, Ctrl-C, reaping
    owned      temporary folders whose owner's life is an advisory lock (any PID namespace)
    launch     the ranks of a data-parallel case, started, handed jobs, ended (rank: their side)

It imports neither torch nor JAX nor any application (an import-linter contract in
`make test`); `lessons` and the registry load implementations and records by name.
"""
