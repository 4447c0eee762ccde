"""The scenario records: the framework-neutral half of each scenario.

`shared/scenarios/<name>.py` defines `SPEC`, a `shared.core.records.Scenario` (fixture
schema and builder, float64 oracle, lesson pattern, porting notes). The registry
(shared/core/registry.py) finds every module here; a record imports only shared.core.
"""
