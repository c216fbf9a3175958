"""A claim group's ``where`` with a method field (``method.server_rule``): it applies where the
method has that field (the rest of the claims report: test_claims.py)."""

import json


def test_a_method_field_in_where_applies_where_the_method_has_it():
    """``where: {method.server_rule: paper}`` keeps FLoRA's paper-rule records, drops its
    authors-rule ones, and leaves Fed-HeLLo's (which has no server_rule) alone."""
    from fedbench.leaderboard.claims import has_fields

    def rec(method, **method_config):
        return {"run": {"method": method, "task": "tiny_text", "run_config": {}, "method_config": method_config,
                        "task_config": {}, "method_version": 1}}

    where = (("method.server_rule", json.dumps("paper")),)
    assert has_fields(rec("flora", server_rule="paper"), where)
    assert not has_fields(rec("flora", server_rule="authors_code"), where)
    assert has_fields(rec("fed_hello", t_rgd=3), where)
    assert not has_fields(rec("fed_hello", t_rgd=3), (("rounds", "7"),))  # a run field always applies
