"""A Deny statement with a Condition the engine cannot judge: never kinder than AWS.

On AWS a Deny whose Condition holds refuses, whatever else allows ("an explicit deny in
any policy overrides any allow", IAM User Guide, "Policy evaluation logic"). The engine
models no request context (aws:SourceIp, aws:RequestedRegion, aws:PrincipalTag ...), so
it cannot tell whether a Condition holds: an Allow with one grants nothing (harsher where
it would hold), and a Deny with one must refuse (harsher where it would not), never let
through what AWS would refuse.
"""

from __future__ import annotations

from onceflow.local import iam

ALLOW = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}
CONDITIONAL_DENY = {
    "Effect": "Deny",
    "Action": "s3:*",
    "Resource": "*",
    "Condition": {"StringNotEquals": {"aws:RequestedRegion": "eu-west-1"}},
}


def test_a_deny_whose_condition_the_engine_cannot_judge_refuses() -> None:
    # GIVEN a role allowed to read the bucket, and denied all of S3 outside eu-west-1
    statements = [ALLOW, CONDITIONAL_DENY]
    # WHEN it reads an object (here, as on AWS in us-east-1, where the Deny holds)
    decision = iam.evaluate(statements, "s3:GetObject", "arn:aws:s3:::b/k")
    # THEN it is refused, as AWS refuses it, not let through
    assert decision is iam.Decision.EXPLICIT_DENY


def test_a_conditional_deny_refuses_only_what_its_action_and_resource_name() -> None:
    # GIVEN the same Deny, limited to deletes
    deny_deletes = {**CONDITIONAL_DENY, "Action": "s3:DeleteObject"}
    # WHEN the role reads THEN its Allow stands; an Allow with a Condition grants nothing
    assert iam.evaluate([ALLOW, deny_deletes], "s3:GetObject", "arn:aws:s3:::b/k") is (
        iam.Decision.ALLOWED
    )
    conditional_allow = {**ALLOW, "Condition": CONDITIONAL_DENY["Condition"]}
    assert iam.evaluate([conditional_allow], "s3:GetObject", "arn:aws:s3:::b/k") is (
        iam.Decision.IMPLICIT_DENY
    )
