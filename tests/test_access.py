"""The rules of a shared POD as a table: every verb x role x reach, allowed or denied."""

import pytest

from cluster.service.access import METHOD_VERBS, Reach, Role, Verb, allowed, denial
from cluster.service.rate_limits import CallLimiter, Limited, Limits

N, O, X = Reach.NONE, Reach.OWN, Reach.OTHERS
# verb: (what a user may reach); the administrator may everything
USER_TABLE = {
    Verb.READ: {N, O, X},
    Verb.LIST: {N, O, X},
    Verb.CREATE: {N},
    Verb.PARTITION: {N, O},
    Verb.KILL_CARD: {N, O},
    Verb.LINK_FAULT: set(),
    Verb.USERS: set(),
}


@pytest.mark.parametrize("verb", list(Verb))
@pytest.mark.parametrize("reach", list(Reach))
def test_the_administrator_may_do_everything_and_a_user_only_what_the_table_says(verb, reach):
    assert allowed(verb, Role.ADMIN, reach)
    assert allowed(verb, Role.USER, reach) == (reach in USER_TABLE[verb])


def test_every_method_of_the_contract_has_a_verb():
    from ipupod_proto import control_pb2

    methods = {m.name for m in control_pb2.DESCRIPTOR.services_by_name["Control"].methods}
    assert methods == set(METHOD_VERBS)


def test_a_denial_says_whose_it_is_not():
    message = denial(Verb.PARTITION, "bob", "alices-run")
    assert "not bob's" in message and "alices-run" in message


def test_a_user_has_one_expensive_call_at_a_time_and_a_rate_per_minute():
    now = [0.0]
    limiter = CallLimiter(Limits(in_flight=1, per_minute=2), clock=lambda: now[0])
    with limiter.expensive("alice"):
        with pytest.raises(Limited, match="already has 1"), limiter.expensive("alice"):
            pass
        with limiter.expensive("bob"):  # another user's slot is their own
            pass
    with limiter.expensive("alice"):
        pass
    with pytest.raises(Limited, match="in the last minute"), limiter.expensive("alice"):
        pass
    now[0] = 30.0  # a token back after half a minute at 2 per minute
    with limiter.expensive("alice"):
        pass
