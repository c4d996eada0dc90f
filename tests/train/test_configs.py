"""Each stage's YAML composes with verl's own config schema, with exactly the overrides
`cuda-agent train stage N` puts on its command line: every key we set is a key of verl's
default config (a typo fails), verl's own validation accepts the result, the typed sections
convert to verl's dataclasses, and the paper's hyper-parameters are what we say they are."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from cuda_agent.train import CONFIG_DIR  # noqa: E402
from cuda_agent.train.stages import STAGES, LaunchSpec, StageError, command, overrides  # noqa: E402

EXTENSIONS = {"hydra.searchpath"}
"""Keys of ours that are not verl config keys (Hydra's own)."""


def leaf_keys(node, prefix=""):
    if OmegaConf.is_dict(node):
        for k, v in node.items_ex(resolve=False):
            yield from leaf_keys(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1]


def own_keys(name):
    raw = OmegaConf.load(CONFIG_DIR / f"{name}.yaml")
    return [k for k in leaf_keys(raw) if not k.startswith("defaults") and k not in EXTENSIONS]


def compose_with(name, args, config_dir=CONFIG_DIR):
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(name, overrides=args)


def spec(stage, tmp_path, model="/models/tiny", **kw):
    data = tmp_path / "train.parquet"
    data.write_bytes(b"")
    return LaunchSpec(stage=stage, model=str(model), data=[str(data)], gpus=8, **kw)


@pytest.fixture(scope="module")
def defaults(verl_config_dir):
    return {"ppo": compose_with("ppo_trainer", [], verl_config_dir),
            "sft": compose_with("sft_trainer_engine", [], verl_config_dir)}


def exists(cfg, key):
    node = cfg
    for part in key.split("."):
        if not OmegaConf.is_dict(node) or part not in node.keys():  # `in node` is False for ??? values
            return False
        node = node._get_node(part)
    return True


@pytest.mark.parametrize("name, base", [("ppo_common", "ppo"), ("stage1_single_turn", "ppo"),
                                        ("stage3_value_pretrain", "ppo"), ("stage4_agentic", "ppo"),
                                        ("agentic_common", "ppo"),
                                        ("stage2_rft", "sft")])
def test_every_key_is_a_verl_key(name, base, defaults):
    keys = own_keys(name)
    assert keys
    missing = [k for k in keys if not exists(defaults[base], k)]
    assert not missing, f"{name}.yaml sets keys verl 0.9.1 does not have: {missing}"


def test_a_typo_is_caught(defaults, tmp_path):
    assert not exists(defaults["ppo"], "actor_rollout_ref.actor.clip_ratio_hi")
    assert exists(defaults["ppo"], "actor_rollout_ref.actor.clip_ratio_high")


@pytest.mark.parametrize("stage", [1, 3, 4])
def test_ppo_stages_compose_and_pass_verls_validation(stage, tmp_path, defaults, tiny_model):
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import FSDPActorConfig, FSDPCriticConfig, RolloutConfig

    kw = {"resume_from": str(tmp_path / "ckpt" / "global_step_20"), "steps": 200} if stage == 4 else {}
    args = overrides(spec(stage, tmp_path, model=tiny_model, **kw))
    cfg = compose_with(STAGES[stage].config, args)
    OmegaConf.resolve(cfg)
    # nothing left open but what verl's own defaults leave open (the disabled reward model's rollout)
    assert OmegaConf.missing_keys(cfg) <= OmegaConf.missing_keys(defaults["ppo"]) - {"actor_rollout_ref.rollout.name"}
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    # typed as verl types them (each section's _target_)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    critic = omega_conf_to_dataclass(cfg.critic)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert isinstance(algo, AlgoConfig) and isinstance(actor, FSDPActorConfig)
    assert isinstance(critic, FSDPCriticConfig) and isinstance(rollout, RolloutConfig)
    assert model.tokenizer is not None and model.hf_config.model_type == "qwen2"
    # the paper's recipe (SPEC section 4)
    assert (algo.adv_estimator, algo.gamma, algo.lam) == ("gae", 1.0, 0.95)
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert actor.optim.lr == (0.0 if stage == 3 else 3e-6) and critic.optim.lr == 6e-6 and need_critic(cfg)
    assert cfg.data.train_batch_size == 1024
    assert cfg.trainer.use_v1 is False  # V1 needs the transfer_queue service (ppo_common.yaml)
    assert "hf_model" in actor.checkpoint.save_contents and "hf_model" not in actor.checkpoint.load_contents
    assert cfg.critic.model.path == cfg.actor_rollout_ref.model.path == str(tiny_model)
    assert cfg.reward.custom_reward_function.path == "pkg://cuda_agent.train.reward_fn"
    context = rollout.prompt_length + rollout.response_length
    if stage == 1:
        assert context == 32 * 1024 and rollout.agent.default_agent_loop == "single_turn_agent"
        assert cfg.trainer.critic_warmup == 0
    else:
        assert context == 128 * 1024 and rollout.agent.default_agent_loop == "cuda_agent"
        assert rollout.agent.agent_loop_config_path == str(CONFIG_DIR / "agent_loop.yaml")
    if stage == 3:  # critic only; the last step "updates" the actor at lr 0, so verl's V0 trainer saves
        assert cfg.trainer.total_training_steps == cfg.trainer.save_freq == cfg.trainer.critic_warmup == 20
        assert actor.optim.lr == 0.0 and critic.optim.lr == 6e-6
    if stage in (3, 4):  # the step count, not the epochs, ends the run (a data set is ~6 steps of 1024)
        assert cfg.trainer.total_epochs * 6 > cfg.trainer.total_training_steps
    if stage == 4:
        assert cfg.trainer.resume_mode == "resume_path" and cfg.trainer.resume_from_path.endswith("global_step_20")
        assert cfg.trainer.total_training_steps == 220 and cfg.trainer.critic_warmup == 0
        assert list(actor.checkpoint.load_contents) == ["model"]  # not stage 3's lr-0 optimizer


def test_custom_reward_and_agent_loop_load_as_verl_loads_them(tmp_path):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from cuda_agent.train.agent_loop import CudaAgentLoop

    cfg = compose_with("stage4_agentic", overrides(spec(4, tmp_path, resume_from="/c/global_step_5")))
    fn = get_custom_reward_fn(cfg)
    s = fn(data_source="cuda_agent", solution_str="no blocks", ground_truth="x", extra_info={})
    assert s["score"] == -1.0 and not s["format_ok"] and "no <file" in s["failure"]
    entries = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert [e.name for e in entries] == ["cuda_agent"]
    from hydra.utils import get_class
    assert get_class(entries[0]._target_) is CudaAgentLoop


def test_sft_stage_composes(tmp_path):
    from verl.utils.import_utils import load_extern_object

    from cuda_agent.train.sft_dataset import RFTDataset

    cfg = compose_with("stage2_rft", overrides(spec(2, tmp_path)))
    OmegaConf.resolve(cfg)
    assert not OmegaConf.missing_keys(cfg)
    assert load_extern_object(cfg.data.custom_cls.path, cfg.data.custom_cls.name) is RFTDataset
    assert cfg.model.path == "/models/tiny" and cfg.data.max_length == 131072
    assert "hf_model" in cfg.checkpoint.save_contents and "hf_model" not in cfg.checkpoint.load_contents


def test_commands_and_their_errors(tmp_path):
    c1 = command(spec(1, tmp_path))
    assert c1[1:3] == ["-m", "verl.trainer.main_ppo"] and c1[c1.index("--config-name") + 1] == "stage1_single_turn"
    c2 = command(spec(2, tmp_path))
    assert "torch.distributed.run" in c2 and "verl.trainer.sft_trainer" in c2 and "--nproc_per_node" in c2
    c4 = command(spec(4, tmp_path, resume_from=str(tmp_path / "global_step_7"), steps=10,
                      overrides=["trainer.save_freq=5"]))
    assert "trainer.total_training_steps=17" in c4 and c4[-1] == "trainer.save_freq=5"
    with pytest.raises(StageError, match="resume"):
        command(spec(4, tmp_path))
    with pytest.raises(StageError, match="global_step_N"):
        command(spec(4, tmp_path, resume_from="/ckpt/latest"))
    with pytest.raises(StageError, match="stages: 1-4"):
        command(spec(5, tmp_path))
    c3 = command(spec(3, tmp_path, warmup_steps=5))
    assert "trainer.total_training_steps=5" in c3 and "trainer.critic_warmup=5" in c3
    with pytest.raises(StageError, match="one node"):
        command(spec(2, tmp_path, nnodes=2))
