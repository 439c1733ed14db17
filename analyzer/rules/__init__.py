"""The rule catalogue: one module per rule (pkbNNN_<name>.py); see base.py for the contract."""

from analyzer.rules.base import Rule, RuleContext, all_rules, run_rules, select_rules

__all__ = ["Rule", "RuleContext", "all_rules", "run_rules", "select_rules"]
