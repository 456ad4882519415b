"""Numbers from traces and patterns: statistics, roles, norms, referents, the seven steps and the lesson's
claims. Never runs a model: nothing here imports models/ or pipeline/ (tests/test_house_rules.py)."""
