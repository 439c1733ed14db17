"""The diagnosis stage: why a candidate is wrong or slow, from evidence the earlier stages left.

    wrong.diagnose_wrong(evaluation)   hypotheses of a wrong result, tested on the saved tensors
    slow.diagnose_slow(record)         slowness causes with static or measured evidence, ranked
    explain.explain(record)            one explanation per candidate, into record.diagnosis

Nothing here guesses: every figure comes from the evaluation or the profile, every cited line
from an Evidence or Finding object of the record.
"""
