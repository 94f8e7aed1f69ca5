"""The example config shipped in the repo must stay loadable (it is what users copy)."""

from pathlib import Path

from kbvqa.models.config import build_roles, describe_roles, load_model_config

EXAMPLE = Path(__file__).resolve().parents[1] / "kbvqa.example.toml"


def test_example_config_loads_and_redacts():
    cfg = load_model_config(EXAMPLE)
    desc = describe_roles(cfg)["roles"]
    assert desc["answerer"]["model"] == "Qwen2.5-VL-7B-Instruct"
    assert isinstance(desc["verifier"], list) and len(desc["verifier"]) == 2
    assert desc["judge"]["api_key_env"] == "<redacted>"
    roles = build_roles(cfg, env={"DEEPSEEK_API_KEY": "k1", "JUDGE_API_KEY": "k2"})
    assert set(roles) == {"answerer", "verifier", "judge"} and len(roles["verifier"]) == 2


def test_example_config_job_tables_build_their_options():
    from kbvqa.pipelines.answer import answer_options
    from kbvqa.pipelines.evaluation import eval_judge_options

    answer = answer_options(EXAMPLE, pipeline="agent")
    assert answer.run.concurrency == 8 and answer.agent.episode.max_turns == 30
    assert eval_judge_options(answer).concurrency == 16
