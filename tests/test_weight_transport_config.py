"""`[weight_transport]`: what the collective transport refuses (LoRA, a backend without servers, data-parallel
engines, resume, a group size that does not match the servers, a multi-node host or port set by hand) and the group
size rl derives from its replicas (on every inference node of a multi-node run)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.rl import RLConfig
from prime_rl.config.trainer import TrainerConfig
from prime_rl.config.weight_transport import WeightTransportConfig
from prime_rl.inference.admin import weight_group

COLLECTIVE = {"type": "collective"}


def test_filesystem_is_the_default():
    cfg = RLConfig.model_validate({})
    assert cfg.trainer.weight_transport.type == "filesystem" == cfg.orchestrator.weight_transport.type


def test_collective_with_lora_is_refused_naming_the_fields():
    with pytest.raises(ValidationError) as e:
        TrainerConfig.model_validate({"weight_transport": COLLECTIVE, "model": {"lora": {"rank": 4}}})
    msg = str(e.value)
    assert "weight_transport.type = 'collective'" in msg and "trainer.model.lora" in msg and "'filesystem'" in msg
    with pytest.raises(ValidationError, match="trainer.model.lora"):
        RLConfig.model_validate({"weight_transport": COLLECTIVE, "trainer": {"model": {"lora": {"rank": 4}}}})


def test_collective_with_a_resume_is_refused():
    with pytest.raises(ValidationError, match="ckpt.resume_step"):
        TrainerConfig.model_validate({"weight_transport": COLLECTIVE, "ckpt": {"resume_step": -1}})
    with pytest.raises(ValidationError, match="resume = true"):
        RLConfig.model_validate({"weight_transport": COLLECTIVE, "resume": True})


def test_collective_needs_an_inference_server_backend():
    with pytest.raises(ValidationError, match=r"needs backend.type = 'server' .*not 'transformers'"):
        OrchestratorConfig.model_validate({"weight_transport": COLLECTIVE, "backend": "transformers"})


def test_rl_derives_the_group_size_from_its_replicas():
    cfg = RLConfig.model_validate({"weight_transport": COLLECTIVE, "deployment": {"infer_replicas_per_node": 2},
                                   "inference": {"vllm": {"tensor_parallel_size": 2}}})  # fmt: skip
    for wt in (cfg.trainer.weight_transport, cfg.orchestrator.weight_transport):
        assert wt.type == "collective" and wt.inference_workers == 4
    spec = cfg.trainer.weight_transport.group_spec("trainer")
    assert spec.world_size == 5 and spec.address == "tcp://127.0.0.1:29660"


def test_rl_refuses_a_group_size_other_than_its_workers_and_data_parallel_engines():
    with pytest.raises(ValidationError, match="inference_workers = 3"):
        RLConfig.model_validate({"weight_transport": {**COLLECTIVE, "inference_workers": 3}})
    with pytest.raises(ValidationError, match="data_parallel_size"):
        RLConfig.model_validate({"weight_transport": COLLECTIVE, "inference": {"vllm": {"data_parallel_size": 2}}})
    with pytest.raises(ValidationError, match="differs from orchestrator.weight_transport"):
        RLConfig.model_validate({"trainer": {"weight_transport": COLLECTIVE}})


def test_multi_node_counts_every_inference_nodes_workers_and_places_the_store_itself():
    cfg = RLConfig.model_validate({"weight_transport": COLLECTIVE, "deployment": {
        "type": "multi-node", "num_infer_nodes": 3, "infer_replicas_per_node": 2}})  # fmt: skip
    assert cfg.trainer.weight_transport.inference_workers == 6 == cfg.orchestrator.weight_transport.inference_workers
    for field, value in (("host", "10.1.2.3"), ("port", 31000)):
        with pytest.raises(ValidationError, match=f"weight_transport.{field} is not used by a multi-node run.*port_base"):
            RLConfig.model_validate({"weight_transport": {**COLLECTIVE, field: value}, "deployment": {"type": "multi-node"}})


def test_a_standalone_process_must_be_given_the_group_size():
    with pytest.raises(ValueError, match="trainer.weight_transport.inference_workers"):
        WeightTransportConfig(type="collective").group_spec("trainer")


def test_the_workers_must_split_evenly_over_the_servers():
    spec = WeightTransportConfig(type="collective", inference_workers=4, host="10.0.0.1", port=1234).group_spec("x")
    assert weight_group(spec, 2) == {"address": "tcp://10.0.0.1:1234", "world_size": 5, "timeout_s": 600.0,
                                     "workers_per_server": 2}  # fmt: skip
    with pytest.raises(ValueError, match="does not split over 3"):
        weight_group(spec, 3)
