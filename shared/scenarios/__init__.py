"""Framework-neutral half of each scenario: fixture schema and builder, oracle, registry record.

`shared/scenarios/<name>.py` defines `SPEC`, a `shared.registry.Scenario`; the
registry lists the modules in teaching order.
"""
