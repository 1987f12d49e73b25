"""The A3R knob for how a pair of models trains together: "is HACPO better than GSPO for this pair?"."""

from a3r.leader.goals import parse_goal
from a3r.leader.knobs import DEFAULT_PAIR, get_knob
from engine.jobs import TrainJob


def test_hacpo_against_gspo_is_a_training_method_comparison_of_a_pair():
    g = parse_goal("Is HACPO better than GSPO for this pair?")
    assert g.factor.key == "team.method" and g.factor.values == ["hacpo", "gspo"]
    # "gspo" is read as the training method, not also as a fixed policy loss
    assert g.fixed == {"team.agents": DEFAULT_PAIR}
    job = TrainJob.model_validate({"team": {"agents": DEFAULT_PAIR, "method": "hacpo"}})
    assert job.team.method.value == "hacpo"


def test_the_baselines_are_named_and_the_policy_loss_reading_of_gspo_stays():
    assert parse_goal("Is HACPO better than naive sharing on arithmetic?").factor.values == ["hacpo", "naive"]
    assert parse_goal("Compare hacpo and gspox2 with lr 1e-5").factor.values == ["hacpo", "gspox2"]
    g = parse_goal("Is GRPO better than GSPO for countdown?")
    assert g.factor.key == "swarm.algorithm.policy_loss"
    assert set(get_knob("team.method").valid_choices()) == {"hacpo", "naive", "gspo", "gspox2"}
